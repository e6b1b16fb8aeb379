//go:build linux

package agent

import (
	"os"
	"sync"

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
