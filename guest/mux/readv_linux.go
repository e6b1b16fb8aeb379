package mux

import (
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"
)

// vectorReader returns readv over r if r is a socket; nil otherwise (the
// guest's port, an *os.File, is read with pagedReader).
func vectorReader(r io.Reader) func(a, b, c, d []byte) (int, error) {
	if _, ok := r.(net.Conn); !ok {
		return nil
	}
	sc, ok := r.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	v := newReadv(rc)
	return func(a, b, c, d []byte) (int, error) {
		v.cnt = 0
		for _, b := range [...][]byte{a, b, c, d} {
			if len(b) > 0 {
				v.add(b)
			}
		}
		if v.cnt == 0 {
			return 0, nil
		}
		return v.do()
	}
}

// maxPages bounds the iovecs of one read: 256 KiB with 4 KiB pages, a
// whole frame of the host's.
const maxPages = 64

// readv is one readv(2) through the runtime's poller, its state held so
// that the steady state allocates nothing.
type readv struct {
	rc  syscall.RawConn
	fn  func(fd uintptr) bool
	iov [maxPages]syscall.Iovec
	cnt int
	n   int
	err syscall.Errno
}

func newReadv(rc syscall.RawConn) *readv {
	v := &readv{rc: rc}
	v.fn = v.call
	return v
}

// add appends b (not empty) to the iovecs.
func (v *readv) add(b []byte) {
	v.iov[v.cnt].Base = &b[0]
	v.iov[v.cnt].SetLen(len(b))
	v.cnt++
}

// do reads into the iovecs added, waiting until the connection is
// readable; io.EOF when it has ended.
func (v *readv) do() (int, error) {
	err := v.rc.Read(v.fn)
	clear(v.iov[:v.cnt])
	if err != nil {
		return 0, err
	}
	if v.err != 0 {
		return 0, v.err
	}
	if v.n == 0 {
		return 0, io.EOF
	}
	return v.n, nil
}

func (v *readv) call(fd uintptr) bool {
	for {
		n, _, e := syscall.Syscall(syscall.SYS_READV, fd, uintptr(unsafe.Pointer(&v.iov[0])), uintptr(v.cnt))
		switch e {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false // wait until readable
		}
		v.n, v.err = int(n), e
		return true
	}
}

// pagedReader returns a read function for r if r is a file (the guest's
// virtio-serial port); nil otherwise.
//
// The port's read(2) returns at most one of its receive buffers, a page
// each (Linux's virtio_console queues PAGE_SIZE buffers and its read
// copies from the current one only), so reading the host's bytes a
// plain read at a time costs a system call per 4 KiB. The port has no
// read_iter, so readv(2) calls its read once per iovec and goes on while
// each iovec comes back full: with page-sized iovecs one readv takes as
// many whole buffers as the host has filled. The first iovec is sized to
// what is left of the buffer the last read stopped in, so a read that
// ended inside a buffer does not cut the next one short.
func pagedReader(r io.Reader) func(p []byte) (int, error) {
	f, ok := r.(*os.File)
	if !ok {
		return nil
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return nil
	}
	v := &pagedRead{readv: newReadv(rc), page: os.Getpagesize()}
	return v.read
}

type pagedRead struct {
	*readv
	page int
	// used is how much of the current receive buffer has been read (0: the
	// next read starts a buffer). Wrong only costs a shorter read.
	used int
	lens [maxPages]int
}

func (v *pagedRead) read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	v.cnt = 0
	for k := v.page - v.used; len(p) > 0 && v.cnt < maxPages; k = v.page {
		k = min(k, len(p))
		v.lens[v.cnt] = k
		v.add(p[:k])
		p = p[k:]
	}
	cnt := v.cnt
	n, err := v.do()
	if err == nil {
		v.used = bufferUsed(v.used, v.page, v.lens[:cnt], n)
	}
	return n, err
}

// bufferUsed is how much of the receive buffer a readv of iovecs lens
// that returned n stopped in has been read, used of it having been read
// before. An iovec that came back short emptied its buffer (the readv
// stops there); one that came back full emptied it if it reached the
// page's end.
func bufferUsed(used, page int, lens []int, n int) int {
	for _, l := range lens {
		if n < l {
			return 0
		}
		n -= l
		if used += l; used >= page {
			used = 0
		}
		if n == 0 {
			return used
		}
	}
	return used
}
