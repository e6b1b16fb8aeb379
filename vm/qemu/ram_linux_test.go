package qemu

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestCopyData: a guest's memory file goes into a template and back into
// a fresh memory file byte for byte, and only what was written is copied.
func TestCopyData(t *testing.T) {
	const size = 16 << 20
	guest, err := newRAM(size)
	if err != nil {
		t.Fatal(err)
	}
	defer guest.Close()
	marks := map[int64]string{0: "first page", 5<<20 + 123: "in the middle", size - 4: "end!"}
	for off, s := range marks {
		if _, err := guest.WriteAt([]byte(s), off); err != nil {
			t.Fatal(err)
		}
	}
	tmpl, err := os.Create(filepath.Join(t.TempDir(), "t.ram"))
	if err != nil {
		t.Fatal(err)
	}
	defer tmpl.Close()
	n, err := copyData(tmpl, guest, size)
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 || n > 1<<20 {
		t.Errorf("copied %d bytes of a file with three short writes in it", n)
	}
	back, err := newRAM(size)
	if err != nil {
		t.Fatal(err)
	}
	defer back.Close()
	if _, err := copyData(back, tmpl, size); err != nil {
		t.Fatal(err)
	}
	for _, f := range []*os.File{tmpl, back} {
		fi, _ := f.Stat()
		if fi.Size() != size {
			t.Errorf("%s: %d bytes, want %d", f.Name(), fi.Size(), size)
		}
		for off, s := range marks {
			got := make([]byte, len(s))
			f.ReadAt(got, off)
			if string(got) != s {
				t.Errorf("%s at %d: %q, want %q", f.Name(), off, got, s)
			}
		}
		zero := make([]byte, 4096)
		got := make([]byte, 4096)
		f.ReadAt(got, 8<<20)
		if !bytes.Equal(got, zero) {
			t.Errorf("%s: a hole reads %q", f.Name(), got[:16])
		}
	}
	// Nothing written: nothing copied, and the copy is all holes.
	empty, _ := newRAM(size)
	defer empty.Close()
	if n, err := copyData(back, empty, size); err != nil || n != 0 {
		t.Errorf("copy of an empty memory file: %d bytes, %v", n, err)
	}
}
