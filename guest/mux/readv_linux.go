package mux

import (
	"io"
	"net"
	"syscall"
	"unsafe"
)

// vectorReader returns readv over r if r is a socket; nil otherwise (the
// guest's port, an *os.File, is read plainly).
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
	v := &readv{rc: rc}
	v.fn = v.call
	return v.read
}

// readv holds one call's state, so that the steady state allocates nothing.
type readv struct {
	rc  syscall.RawConn
	fn  func(fd uintptr) bool
	iov [4]syscall.Iovec
	cnt int
	n   int
	err syscall.Errno
}

// read reads into a, b, c and d in turn (empty ones are skipped).
func (v *readv) read(a, b, c, d []byte) (int, error) {
	v.cnt = 0
	for _, b := range [...][]byte{a, b, c, d} {
		if len(b) > 0 {
			v.iov[v.cnt].Base = &b[0]
			v.iov[v.cnt].SetLen(len(b))
			v.cnt++
		}
	}
	if v.cnt == 0 {
		return 0, nil
	}
	err := v.rc.Read(v.fn)
	v.iov = [4]syscall.Iovec{}
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
