//go:build linux

package agent

import (
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/guest/api/execwire"
)

const (
	// readSize is one read from a task's output pipe. Pipes are enlarged to
	// pipeSize once a read shows a task writing much (growAt), so a task
	// writing big blocks is read in few syscalls; a read takes a whole
	// pipe, so a task blocked on a full pipe is woken once per pipe rather
	// than once per read (each wakeup is costly in a guest under TCG).
	readSize = pipeSize
	pipeSize = 1 << 20
	growAt   = 32 << 10
	// maxPending bounds output read but not yet sent, per pipe; beyond it
	// the reader, and so the task, waits for the host. A message is at
	// most maxPending+readSize bytes.
	maxPending = 256 << 10
	// room is the space kept in front of a buffer's data for the frame
	// header, so a message leaves with one write and no copy.
	room = execwire.HeaderSize
	// bufSize holds the most a message can be, so appending never
	// reallocates.
	bufSize = room + maxPending + readSize
	// maxFreeBufs bounds the buffers kept between tasks.
	maxFreeBufs = 8
)

// freeBufs keeps output buffers between tasks. Unlike a sync.Pool it is not
// emptied by every garbage collection: a fresh buffer costs clearing half a
// megabyte, slow under emulation, and more garbage to collect.
var freeBufs = make(chan []byte, maxFreeBufs)

func getBuf() []byte {
	select {
	case b := <-freeBufs:
		return b
	default:
		return make([]byte, bufSize)
	}
}

func putBuf(b []byte) {
	if cap(b) != bufSize {
		return
	}
	select {
	case freeBufs <- b[:bufSize]:
	default:
	}
}

// output carries what one of a task's pipes yields to the sender. A read
// into an idle output hands the read buffer itself over (no copy: large
// writes cost one copy out of the pipe); while the sender is busy, reads
// pile up and leave as one message: a task writing small blocks costs one
// message per send, not one per write, and nothing waits when the sender is
// idle.
type output struct {
	mu    sync.Mutex
	buf   []byte // room, then what was read and not yet taken
	spare []byte // a taken buffer given back, used for the next read
	eof   bool
	ready chan struct{} // cap 1: data or EOF waits
	space chan struct{} // cap 1: the sender took data
}

func newOutput() *output {
	return &output{ready: make(chan struct{}, 1), space: make(chan struct{}, 1)}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// push queues p, the buffer the last read filled after room bytes, waiting
// while maxPending bytes are already waiting. It returns the buffer for the
// next read.
func (o *output) push(p []byte) []byte {
	o.mu.Lock()
	for len(o.buf)-room >= maxPending {
		o.mu.Unlock()
		<-o.space
		o.mu.Lock()
	}
	var next []byte
	if o.buf == nil {
		o.buf = p // hand over: the sender gives it back through recycle
		next, o.spare = o.spare, nil
	} else {
		o.buf = append(o.buf, p[room:]...) // fits: len(o.buf) < room+maxPending
		next = p
	}
	o.mu.Unlock()
	signal(o.ready)
	if next == nil {
		next = getBuf()
	}
	return next[:cap(next)]
}

// close marks the end of the output.
func (o *output) close() {
	o.mu.Lock()
	o.eof = true
	o.mu.Unlock()
	signal(o.ready)
}

// take returns what waits, after room bytes for the header (nil if
// nothing), and whether the output ended with it. The caller gives the
// slice back with recycle once sent.
func (o *output) take() (data []byte, eof bool) {
	o.mu.Lock()
	data, o.buf = o.buf, nil
	eof = o.eof
	o.mu.Unlock()
	if data != nil {
		signal(o.space)
	}
	return data, eof
}

// recycle hands a sent buffer back for reuse.
func (o *output) recycle(b []byte) {
	if cap(b) != bufSize {
		return
	}
	o.mu.Lock()
	if o.spare == nil {
		o.spare, b = b[:0], nil
	}
	o.mu.Unlock()
	if b != nil {
		putBuf(b)
	}
}

// release returns o's buffers for other tasks, once reader and sender are
// done with it.
func (o *output) release() {
	o.mu.Lock()
	spare, buf := o.spare, o.buf
	o.spare, o.buf = nil, nil
	o.mu.Unlock()
	putBuf(spare)
	putBuf(buf)
}

// read feeds o from f until EOF or error, then closes o. A PTY master
// reports EIO once the last terminal user is gone: that is its EOF.
func (o *output) read(wg *sync.WaitGroup, f *os.File, pipe bool) {
	defer wg.Done()
	defer o.close()
	buf := getBuf()
	defer func() { putBuf(buf) }()
	grown := !pipe
	for {
		n, err := f.Read(buf[room : room+readSize])
		if n > 0 {
			if !grown && n >= growAt {
				growPipe(f)
				grown = true
			}
			buf = o.push(buf[:room+n])
		}
		if err != nil {
			return
		}
	}
}

// spliceMin: a pipe holding less than this is read and sent as a copy.
// Spliced, a frame costs three syscalls (its header into the mux's staging
// pipe, the bytes into it, all of it to the port) against a read and a
// write: copying a little is cheaper.
const spliceMin = 16 << 10

// spliced counts the output bytes that went by splice (for tests).
var spliced atomic.Int64

// outputSplicer is a task stream that moves output from a pipe to the
// transport without copying it (execwire.Stream on the serial port).
type outputSplicer interface {
	SpliceOutput(k execwire.Kind, pipe syscall.RawConn, avail int) (int, error)
}

// pump sends what pipe f yields as output of kind k, once started is
// closed (the task's Started has gone). Where st can splice, it sends
// itself: a task's first bytes are read and sent as they come; once a read
// shows it writing much, the pipe is grown and what piles up in it moves
// to the transport with splice(2), no copy through the agent. Otherwise,
// or once splicing is refused or a send fails, the rest is read and handed
// to the sender (read). Either way o is closed at the end of the pipe.
func (o *output) pump(wg *sync.WaitGroup, f *os.File, pipe bool, k execwire.Kind, st ExecStream, started <-chan struct{}) {
	sp, ok := st.(outputSplicer)
	var rc syscall.RawConn
	if ok && pipe {
		rc, _ = f.SyscallConn()
	}
	if rc != nil {
		// Nothing asked: says whether the stream can splice at all.
		if _, err := sp.SpliceOutput(k, rc, 0); err != nil {
			rc = nil
		}
	}
	if rc == nil || !o.splice(f, rc, k, st, sp, started) {
		o.read(wg, f, pipe)
		return
	}
	o.close()
	wg.Done()
}

// splice sends f's output (see pump) until f ends (true) or must be read
// instead (false).
func (o *output) splice(f *os.File, rc syscall.RawConn, k execwire.Kind, st ExecStream, sp outputSplicer, started <-chan struct{}) bool {
	var buf []byte
	defer func() { putBuf(buf) }()
	// copyOut reads up to n bytes and sends them: how many, why the read
	// failed (the end of the pipe), why the send failed.
	copyOut := func(n int) (m int, rerr, serr error) {
		if buf == nil {
			buf = getBuf()
		}
		m, rerr = f.Read(buf[room : room+n])
		if m > 0 {
			<-started
			serr = st.SendOutput(k, buf[:room+m])
		}
		return m, rerr, serr
	}
	// After a failed send the rest is read for the sender, which finds the
	// failure and drops it: the task never stalls on a full pipe.
	for {
		m, rerr, serr := copyOut(growAt)
		if serr != nil {
			return false
		}
		if rerr != nil {
			return true
		}
		if m == growAt {
			break
		}
	}
	growPipe(f)
	for {
		n, err := waitPipe(rc)
		if err != nil || n == 0 {
			return true
		}
		if n < spliceMin {
			_, rerr, serr := copyOut(n)
			if serr != nil {
				return false
			}
			if rerr != nil {
				return true
			}
			continue
		}
		<-started
		m, err := sp.SpliceOutput(k, rc, n)
		if err != nil {
			return false
		}
		spliced.Add(int64(m))
	}
}

// waitPipe waits until the pipe behind rc holds bytes and says how many;
// 0 once it is empty with no writer left.
func waitPipe(rc syscall.RawConn) (n int, err error) {
	var ierr error
	err = rc.Read(func(fd uintptr) bool {
		for {
			v, err := unix.IoctlGetInt(int(fd), unix.TIOCINQ) // FIONREAD
			if err != nil {
				ierr = os.NewSyscallError("ioctl FIONREAD", err)
				return true
			}
			if v > 0 {
				n = v
				return true
			}
			p := [1]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			_, err = unix.Poll(p[:], 0)
			switch {
			case err == unix.EINTR:
				continue
			case err != nil:
				ierr = os.NewSyscallError("poll", err)
				return true
			case p[0].Revents&unix.POLLIN != 0:
				continue // written meanwhile
			case p[0].Revents&(unix.POLLHUP|unix.POLLERR) != 0:
				return true // no writer left: the end
			}
			return false // wait until readable
		}
	})
	if err == nil {
		err = ierr
	}
	return n, err
}
