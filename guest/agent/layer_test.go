//go:build linux

package agent

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fakeUpper makes an overlay upper folder as overlayfs leaves it: a new
// file, a modified one in a copied-up folder, a whiteout, an opaque
// folder, a symlink. Whiteouts need mknod (root) and opaque marks trusted
// xattrs (root): without them the test is skipped.
func fakeUpper(t *testing.T) string {
	t.Helper()
	up := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(up, "new.txt"), []byte("new"), 0o640))
	must(os.Mkdir(filepath.Join(up, "src"), 0o755))
	must(os.WriteFile(filepath.Join(up, "src", "main.go"), []byte("package main\n"), 0o644))
	if err := unix.Mknod(filepath.Join(up, "src", "gone.go"), unix.S_IFCHR|0o000, 0); err != nil {
		t.Skipf("no whiteouts here (mknod needs root): %v", err)
	}
	must(os.Mkdir(filepath.Join(up, "build"), 0o700))
	if err := unix.Lsetxattr(filepath.Join(up, "build"), overlayOpaque, []byte("y"), 0); err != nil {
		t.Skipf("no trusted xattrs here (root on a file system with them): %v", err)
	}
	must(os.WriteFile(filepath.Join(up, "build", "out"), []byte("o"), 0o755))
	must(os.Symlink("src/main.go", filepath.Join(up, "link")))
	must(unix.Mkfifo(filepath.Join(up, "fifo"), 0o600))
	when := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)
	must(os.Chtimes(filepath.Join(up, "new.txt"), when, when))
	return up
}

func TestExportLayer(t *testing.T) {
	up := fakeUpper(t)
	var buf bytes.Buffer
	n, err := ExportLayer(context.Background(), up, "", &buf)
	if err != nil {
		t.Fatal(err)
	}
	type entry struct {
		name string
		typ  byte
		mode int64
		body string
		link string
	}
	want := []entry{
		{"build/", tar.TypeDir, 0o700, "", ""},
		{"build/.wh..wh..opq", tar.TypeReg, 0o644, "", ""},
		{"build/out", tar.TypeReg, 0o755, "o", ""},
		{"fifo", tar.TypeFifo, 0o600, "", ""},
		{"link", tar.TypeSymlink, 0o777, "", "src/main.go"},
		{"new.txt", tar.TypeReg, 0o640, "new", ""},
		{"src/", tar.TypeDir, 0o755, "", ""},
		{"src/.wh.gone.go", tar.TypeReg, 0o644, "", ""},
		{"src/main.go", tar.TypeReg, 0o644, "package main\n", ""},
	}
	tr := tar.NewReader(&buf)
	var got []entry
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Format != tar.FormatPAX && h.Format != tar.FormatUSTAR {
			t.Errorf("%s: format %v", h.Name, h.Format)
		}
		body, _ := io.ReadAll(tr)
		got = append(got, entry{h.Name, h.Typeflag, h.Mode, string(body), h.Linkname})
		if h.Name == "new.txt" && !h.ModTime.Equal(time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC)) {
			t.Errorf("new.txt mtime %v", h.ModTime)
		}
	}
	if len(got) != len(want) || uint64(len(got)) != n {
		t.Fatalf("got %d entries (said %d):\n%v\nwant\n%v", len(got), n, got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("entry %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

// TestExportLayerCancel: an export whose host went stops walking.
func TestExportLayerCancel(t *testing.T) {
	up := fakeUpper(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := ExportLayer(ctx, up, "", io.Discard); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
}

func TestForgetLayer(t *testing.T) {
	up := fakeUpper(t)
	low := t.TempDir()
	// The lower layer has src (same mode), so src emptied goes too.
	if err := os.Mkdir(filepath.Join(low, "src"), 0o755); err != nil {
		t.Fatal(err)
	}
	n, err := ForgetLayer(up, low, []string{"src/main.go", "src/gone.go", "build", "missing/x"})
	if err != nil {
		t.Fatal(err)
	}
	// main.go, the whiteout, build/out, build, then src emptied.
	if n != 5 {
		t.Errorf("removed %d entries, want 5", n)
	}
	ents, _ := os.ReadDir(up)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "fifo link new.txt" {
		t.Errorf("left %v", names)
	}
	for _, bad := range []string{"../x", "/etc", ".", "a/../../b", "a//b", ""} {
		if _, err := ForgetLayer(up, low, []string{bad}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if _, err := ForgetLayer(up, low, nil); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(up); len(ents) != 0 {
		t.Errorf("forget all left %d entries", len(ents))
	}
}

// TestExportLayerOpaqueNew: a folder made new (overlayfs marks it opaque
// too) hides nothing of the lower folder and is exported without the mark;
// one the lower folder has keeps it.
func TestExportLayerOpaqueNew(t *testing.T) {
	up := fakeUpper(t)
	low := t.TempDir()
	var buf bytes.Buffer
	if _, err := ExportLayer(context.Background(), up, low, &buf); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(buf.Bytes(), []byte(opaqueWhiteout)) {
		t.Error("a new folder's opaque mark was exported")
	}
	if err := os.Mkdir(filepath.Join(low, "build"), 0o755); err != nil {
		t.Fatal(err)
	}
	buf.Reset()
	if _, err := ExportLayer(context.Background(), up, low, &buf); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(buf.Bytes(), []byte("build/"+opaqueWhiteout)) {
		t.Error("the opaque mark of a folder that hides the lower one was left out")
	}
}
