//go:build linux

package agent

import (
	"os"
	"sync"
)

const (
	// readSize is one read from a task's output pipe. Pipes are enlarged to
	// pipeSize, so a task writing big blocks is read in few syscalls.
	readSize = 256 << 10
	pipeSize = 1 << 20
	// maxPending bounds output read but not yet sent, per pipe; beyond it
	// the reader, and so the task, waits for the host. A message is at
	// most maxPending+readSize bytes.
	maxPending = 256 << 10
)

var readBufs = sync.Pool{New: func() any { b := make([]byte, readSize); return &b }}

// output carries what one of a task's pipes yields to the sender. While the
// sender is busy, reads pile up and leave as one message: a task writing
// small blocks costs one message per send, not one per write, and nothing
// waits when the sender is idle.
type output struct {
	mu    sync.Mutex
	buf   []byte // read, not yet taken
	spare []byte // a taken buffer given back, reused by the next push
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

// push appends p, waiting while maxPending bytes are already waiting.
func (o *output) push(p []byte) {
	o.mu.Lock()
	for len(o.buf) >= maxPending {
		o.mu.Unlock()
		<-o.space
		o.mu.Lock()
	}
	if o.buf == nil {
		o.buf, o.spare = o.spare[:0], nil
	}
	o.buf = append(o.buf, p...)
	o.mu.Unlock()
	signal(o.ready)
}

// close marks the end of the output.
func (o *output) close() {
	o.mu.Lock()
	o.eof = true
	o.mu.Unlock()
	signal(o.ready)
}

// take returns what waits (nil if nothing) and whether the output ended
// with it. The caller gives the slice back with recycle once sent.
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
	if cap(b) > 2*maxPending {
		return
	}
	o.mu.Lock()
	if o.spare == nil {
		o.spare = b[:0]
	}
	o.mu.Unlock()
}

// read feeds o from f until EOF or error, then closes o. A PTY master
// reports EIO once the last terminal user is gone: that is its EOF.
func (o *output) read(wg *sync.WaitGroup, f *os.File) {
	defer wg.Done()
	defer o.close()
	bp := readBufs.Get().(*[]byte)
	defer readBufs.Put(bp)
	buf := *bp
	for {
		n, err := f.Read(buf)
		if n > 0 {
			o.push(buf[:n])
		}
		if err != nil {
			return
		}
	}
}
