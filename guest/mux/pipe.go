package mux

import (
	"errors"
	"fmt"
	"net"
	"syscall"
)

// PipeWriter is implemented by the streams of a session whose connection
// takes splice(2) (Config.Splice): bytes go from a pipe to the connection
// without passing through the process.
type PipeWriter interface {
	// WritePipe sends one data frame: head, then n bytes moved from the
	// pipe pipe reads, where 0 < n <= avail is as much as the stream's
	// credit (WritePipe waits for credit as Write does) and the frame size
	// allow. setLen(n) is called before head is sent, so that head can say
	// how much follows it. The pipe must hold at least avail bytes and
	// have no other reader. With avail 0 it sends nothing and says only
	// whether the session can splice.
	//
	// Where the session cannot splice it returns an error matching
	// errors.ErrUnsupported, having sent and consumed nothing; the caller
	// copies instead (so it does the first time the kernel refuses, for
	// that frame, within WritePipe). A pipe closed under it is returned as
	// such, nothing sent. A frame cut by a failed write or splice ends the
	// session, like a failed Write.
	WritePipe(head []byte, setLen func(n int), pipe syscall.RawConn, avail int) (int, error)
}

// errNoSplice: the session's connection cannot be spliced to.
var errNoSplice = fmt.Errorf("mux: the connection takes no splice: %w", errors.ErrUnsupported)

// maxHead bounds WritePipe's head.
const maxHead = 4 << 10

// pipeTail is the part of a frame that comes from a pipe.
type pipeTail struct {
	fd uintptr // the pipe
	n  int
}

// WritePipe: see PipeWriter.
func (c *conn) WritePipe(head []byte, setLen func(n int), pipe syscall.RawConn, avail int) (int, error) {
	if c.closedFlag.Load() {
		return 0, net.ErrClosed
	}
	if c.s.out == nil || c.s.noSplice.Load() {
		return 0, errNoSplice
	}
	if len(head) > maxHead {
		return 0, fmt.Errorf("mux: a %d-byte head, more than %d", len(head), maxHead)
	}
	if avail <= 0 {
		return 0, nil
	}
	c.mu.Lock()
	// More credit than head takes; it comes: the peer returns credit once
	// it has read half its window, and all but len(head) of it is unread.
	if err := c.awaitCredit(len(head)); err != nil {
		return 0, err
	}
	n := min(avail, int(c.credit)-len(head), maxFrame)
	c.credit -= uint32(len(head) + n)
	c.inflight++
	c.mu.Unlock()
	sent, err := c.s.writePipe(c.ep, c.id, head, setLen, pipe, n)
	if !sent {
		c.mu.Lock()
		c.credit += uint32(len(head) + n)
		c.wcond.Broadcast()
		c.mu.Unlock()
	}
	c.sendDone()
	switch {
	case err == nil:
		return n, nil
	case err == ErrPeerRestarted:
		return 0, c.deadErr()
	case !sent:
		return 0, err
	}
	c.s.fail(fmt.Errorf("%w: write: %w", ErrClosed, err))
	return 0, c.deadErr()
}

// writePipe sends one data frame of stream id in ep: head, then n bytes
// spliced from pipe. sent says whether any of it went out.
func (s *Session) writePipe(ep *epoch, id uint32, head []byte, setLen func(int), pipe syscall.RawConn, n int) (sent bool, err error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.wepoch != ep.n {
		return false, ErrPeerRestarted
	}
	// The pipe stays open while its bytes move: its Close waits.
	cerr := pipe.Control(func(fd uintptr) {
		sent = true
		setLen(n)
		putHeader(s.hdr[:], typeData, 0, id, uint32(len(head)+n))
		err = s.writeLocked(s.hdr[:], head, &pipeTail{fd: fd, n: n})
	})
	if cerr != nil {
		return false, cerr
	}
	return sent, err
}
