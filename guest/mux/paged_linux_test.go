package mux

import (
	"bytes"
	"io"
	"os"
	"syscall"
	"testing"
	"time"
)

func init() {
	// Files over a socket pair: both ends are read as the guest's port is,
	// with page-sized readv (pagedReader).
	connKinds["portfiles"] = portFiles
}

func portFiles(t testing.TB) (io.ReadWriteCloser, io.ReadWriteCloser) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	return os.NewFile(uintptr(fds[0]), "port-a"), os.NewFile(uintptr(fds[1]), "port-b")
}

func TestBufferUsed(t *testing.T) {
	const page = 4096
	for _, c := range []struct {
		name    string
		used    int
		lens    []int
		n, want int
	}{
		{"whole pages", 0, []int{page, page, page}, 3 * page, 0},
		{"stopped at a short buffer", 0, []int{page, page, page}, page + 100, 0},
		{"the rest of a buffer, then pages", 100, []int{page - 100, page}, 2*page - 100, 0},
		{"a short rest ends the read", 100, []int{page - 100, page}, 50, 0},
		{"a small read inside a buffer", 0, []int{18}, 18, 18},
		{"another one after it", 18, []int{12}, 12, 30},
		{"the last iovec filled part of a page", 0, []int{page, 1000}, page + 1000, 1000},
		{"nothing past a full iovec", 0, []int{page, page}, page, 0},
		{"a full small iovec, nothing after", 0, []int{200, page}, 200, 200},
	} {
		if got := bufferUsed(c.used, page, c.lens, c.n); got != c.want {
			t.Errorf("%s: bufferUsed(%d, %v, %d) = %d, want %d", c.name, c.used, c.lens, c.n, got, c.want)
		}
	}
}

// The guest's port is an *os.File: its frame reader reads it with
// pagedReader, into several page-sized parts at once, and keeps the
// deadline that Interrupt relies on.
func TestPagedReader(t *testing.T) {
	a, b := portFiles(t)
	defer a.Close()
	defer b.Close()
	f := newFrameReader(b)
	if !f.paged || f.readv != nil {
		t.Fatalf("frame reader of a file: paged %v, readv %v; want paged", f.paged, f.readv != nil)
	}
	data := pattern(9, 200<<10)
	go a.(io.Writer).Write(data)
	got := make([]byte, len(data))
	for n := 0; n < len(got); {
		time.Sleep(10 * time.Millisecond) // let the writer get ahead
		m, err := f.read(got[n:])
		if err != nil {
			t.Fatal(err)
		}
		n += m
	}
	if !bytes.Equal(got, data) {
		t.Fatal("read through pages: not byte-exact")
	}
	b.(*os.File).SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := f.read(got); !os.IsTimeout(err) {
		t.Fatalf("read past the deadline = %v, want a timeout", err)
	}
	a.Close()
	b.(*os.File).SetReadDeadline(time.Time{})
	if n, err := f.read(got); n != 0 || err != io.EOF {
		t.Fatalf("read after the peer closed = %d, %v; want EOF", n, err)
	}
}
