package mux

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// A frame's spliced bytes reach the connection through a pipe of the
// session's own (stage): the frame's header is written into it, the
// caller's bytes are spliced into it from the caller's pipe (pages move,
// nothing is copied), and all that stage holds is spliced to the
// connection at once, one buffer for the device: header and payload, one
// notification of the host.
//
// Never splicing straight from the caller's pipe is not only about the
// header. The virtio console driver of Linux 6.1 (port_fops_splice_write)
// sizes its scatterlist by the pipe's occupancy and hands it to the
// virtqueue whole: a splice that takes fewer than all the pipe's buffers,
// as one of a frame's worth from a pipe the task keeps writing into does,
// gives the device empty descriptors past the real ones, and the host's
// QEMU stops taking data from the port for good (seen: the port stalled
// after the first such frame). stage has no other writer, and each splice
// out of it takes everything it holds.

// stageSize is stage's capacity: a frame whose bytes take more goes out
// in more than one piece (one device buffer each).
const stageSize = 1 << 20

// spliceAll is the length asked of a splice that empties stage.
const spliceAll = 1 << 30

// spliceOut is the connection as a splice(2) target.
type spliceOut struct {
	rc   syscall.RawConn
	w    io.Writer // the connection, for copying where splice fails
	buf  []byte    // for copying
	r, s *os.File  // stage's ends
	rrc  syscall.RawConn
	wrc  syscall.RawConn
	once sync.Once

	// One call's state, so that the steady state allocates nothing.
	toConn  func(fd uintptr) bool
	toStage func(fd uintptr) bool
	src     int // the caller's pipe
	left    int // what is still to come from it
	stage   int // stage's read end, while draining
	staged  int // bytes in stage
	moved   int
	err     error
}

// newSpliceOut returns conn as a splice target; nil if it has no file
// descriptor or no pipe can be made.
func newSpliceOut(conn io.ReadWriteCloser) *spliceOut {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil
	}
	_, _ = unix.FcntlInt(uintptr(p[0]), unix.F_SETPIPE_SZ, stageSize) // else smaller pieces
	o := &spliceOut{rc: rc, w: conn, r: os.NewFile(uintptr(p[0]), "|stage"), s: os.NewFile(uintptr(p[1]), "stage|")}
	o.rrc, _ = o.r.SyscallConn()
	o.wrc, _ = o.s.SyscallConn()
	o.toConn, o.toStage = o.callConn, o.callStage
	return o
}

// close closes stage, once the session's connection is closed (a splice
// in progress has been let go).
func (o *spliceOut) close() {
	o.once.Do(func() {
		o.r.Close()
		o.s.Close()
	})
}

// putPipe writes ctrl, hdr and head, then moves t's bytes from its pipe.
// A kernel that cannot splice to the connection (found on the first
// splice to it, before anything reached it) has the frame copied instead,
// and splicing is off for the session from then on. s.wmu is held.
func (s *Session) putPipe(ctrl, hdr, head []byte, t *pipeTail) error {
	o := s.out
	if o == nil {
		return errNoSplice
	}
	lead := len(ctrl) + len(hdr) + len(head)
	if lead > 4<<10 {
		// Many control frames: they go ahead on their own.
		if _, err := s.conn.Write(ctrl); err != nil {
			return err
		}
		ctrl, lead = nil, len(hdr)+len(head)
	}
	s.wbuf = append(append(append(s.wbuf[:0], ctrl...), hdr...), head...)
	err := o.move(s.wbuf, int(t.fd), t.n)
	if errors.Is(err, errors.ErrUnsupported) {
		s.noSplice.Store(true)
		err = o.copy()
	}
	return err
}

// move sends lead, then n bytes from the pipe src, through stage. It
// fails as unsupported if the connection refuses the first splice.
func (o *spliceOut) move(lead []byte, src, n int) error {
	o.src, o.left, o.staged = src, n, 0
	var werr error
	if err := o.wrc.Control(func(fd uintptr) {
		for len(lead) > 0 {
			k, err := unix.Write(int(fd), lead)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				werr = os.NewSyscallError("write", err)
				return
			}
			lead = lead[k:]
			o.staged += k
		}
	}); err != nil {
		return err
	}
	if werr != nil {
		return werr
	}
	first := true
	for {
		// Fill stage from src, then empty it into the connection.
		if o.left > 0 {
			o.moved, o.err = 0, nil
			if err := o.wrc.Control(func(fd uintptr) { o.toStage(fd) }); err != nil {
				return err
			}
			switch {
			case o.err == unix.EAGAIN && o.staged > 0: // stage is full
			case o.err != nil:
				return o.dry(os.NewSyscallError("splice", o.err))
			case o.moved == 0:
				return o.dry(nil)
			}
			o.left -= o.moved
			o.staged += o.moved
		}
		if o.staged == 0 {
			return nil
		}
		var err error
		if cerr := o.rrc.Control(func(fd uintptr) { err = o.drain(int(fd)) }); cerr != nil {
			return cerr
		}
		if err != nil {
			if first && (o.err == unix.EINVAL || o.err == unix.ENOSYS || o.err == unix.EOPNOTSUPP) {
				return fmt.Errorf("%w: %w", errNoSplice, err)
			}
			return err
		}
		first = false
	}
}

// dry is why src had less than it was to have: the frame is cut.
func (o *spliceOut) dry(err error) error {
	if err == nil {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("splice: the pipe ran dry %d bytes before the frame's end: %w", o.left, err)
}

// callStage splices what is left of src into stage (fd), as much as fits.
func (o *spliceOut) callStage(fd uintptr) bool {
	for {
		m, err := unix.Splice(o.src, nil, int(fd), nil, o.left, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
		if err == unix.EINTR {
			continue
		}
		o.moved, o.err = int(m), err
		return true
	}
}

// drain splices all stage holds (its read end, fd) to the connection,
// waiting while the connection takes no more.
func (o *spliceOut) drain(fd int) error {
	o.stage = fd
	for o.staged > 0 {
		o.moved, o.err = 0, nil
		if err := o.rc.Write(o.toConn); err != nil {
			return err
		}
		if o.err != nil {
			return os.NewSyscallError("splice", o.err)
		}
		if o.moved == 0 {
			return fmt.Errorf("splice: the connection took nothing of %d bytes", o.staged)
		}
		o.staged -= o.moved
	}
	return nil
}

// callConn splices stage to the connection (fd).
func (o *spliceOut) callConn(fd uintptr) bool {
	for {
		m, err := unix.Splice(o.stage, nil, int(fd), nil, spliceAll, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
		switch err {
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false // wait until the connection takes more
		}
		o.moved, o.err = int(m), err
		return true
	}
}

// copy sends what move left undone by copying: what stage holds, then
// what is left of src.
func (o *spliceOut) copy() error {
	if o.buf == nil {
		o.buf = make([]byte, 64<<10)
	}
	var err error
	if cerr := o.rrc.Control(func(fd uintptr) {
		for o.staged > 0 && err == nil {
			var k int
			if k, err = o.copyFrom(int(fd), o.staged); err == nil {
				o.staged -= k
			}
		}
	}); cerr != nil {
		return cerr
	}
	for o.left > 0 && err == nil {
		var k int
		if k, err = o.copyFrom(o.src, o.left); err == nil {
			o.left -= k
		}
	}
	return err
}

// copyFrom copies up to n bytes, which the pipe fd holds, to the
// connection, in one read.
func (o *spliceOut) copyFrom(fd, n int) (int, error) {
	for {
		k, err := unix.Read(fd, o.buf[:min(n, len(o.buf))])
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return 0, os.NewSyscallError("read", err)
		case k == 0:
			return 0, fmt.Errorf("read: the pipe ended %d bytes early: %w", n, io.ErrUnexpectedEOF)
		}
		_, err = o.w.Write(o.buf[:k])
		return k, err
	}
}
