package mux

import (
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// errDeadline is what reads and writes return when a deadline passes, as for
// any net.Conn.
var errDeadline = os.ErrDeadlineExceeded

// Addr is the address of one end of a stream: the port it was opened to on
// the accepting side, 0 on the opening side (streams have no source port).
type Addr struct{ Port uint32 }

// Network returns "mux".
func (Addr) Network() string { return "mux" }

// String returns "mux:<port>".
func (a Addr) String() string { return fmt.Sprintf("mux:%d", a.Port) }

// conn is one stream, a net.Conn with CloseWrite.
type conn struct {
	s             *Session
	ep            *epoch
	id            uint32
	local, remote Addr
	closedFlag    atomic.Bool
	closeOnce     sync.Once
	openc         chan struct{} // closed when the peer answers our open

	mu    sync.Mutex
	rcond sync.Cond // readers wait here
	wcond sync.Cond // writers wait here

	opening bool // our open is not answered yet
	refused bool
	reset   bool // by either side
	dead    bool // the epoch ended
	gone    bool // removed from the epoch
	closed  bool // Close was called: what arrives is dropped

	// Receiving. Unread bytes wait in in, which never exceeds the window,
	// since the peer may not send more than that unread.
	in        ring
	waitBuf   []byte // a waiting reader's buffer, for the receive loop to fill
	filling   bool   // the receive loop is filling waitBuf
	directN   int    // bytes the receive loop put into a reader's buffer
	rseq      uint64 // numbers Read calls, so concurrent ones keep apart
	waitOwner uint64 // the Read whose buffer waitBuf is
	directFor uint64 // the Read whose buffer holds directN bytes
	window    uint32 // our receive buffer: Config.Window or PeerWindow
	recvAvail uint32 // credit the peer has
	unacked   uint32 // bytes read, their credit not yet returned
	recvFin   bool

	// Sending.
	credit     uint32
	sentFin    bool
	inflight   int         // Writes sending a frame outside c.mu
	finPending bool        // FIN waits for inflight to reach 0
	ctimer     *time.Timer // resets the stream streamCloseTimeout after sentFin
	htimer     *time.Timer // refuses the open if it is held unanswered too long

	rgen, wgen       int // deadline generations
	rexpired, wexpir bool
	rtimer, wtimer   *time.Timer
}

func newConn(s *Session, ep *epoch, id uint32, local, remote Addr, window int) *conn {
	c := &conn{s: s, ep: ep, id: id, local: local, remote: remote, credit: minWindow, window: uint32(window), recvAvail: uint32(window)}
	c.rcond.L = &c.mu
	c.wcond.L = &c.mu
	return c
}

// wake wakes every reader and writer to look again. c.mu is held.
func (c *conn) wake() {
	c.rcond.Broadcast()
	c.wcond.Broadcast()
}

// answer marks our open answered. c.mu is held.
func (c *conn) answer() {
	if c.opening {
		c.opening = false
		close(c.openc)
	}
}

// consumed counts n bytes as read and returns the credit to give back, if
// it is time to: once half the window has been read. c.mu is held.
func (c *conn) consumed(n int) uint32 {
	c.unacked += uint32(n)
	if c.unacked < c.window/2 || c.recvFin || c.reset || c.dead {
		return 0
	}
	d := c.unacked
	c.unacked = 0
	c.recvAvail += d
	return d
}

// remove takes c out of its epoch: the peer is done with it too, or it was reset.
func (c *conn) remove() {
	c.mu.Lock()
	c.gone = true
	if c.ctimer != nil {
		c.ctimer.Stop()
	}
	c.wake()
	c.mu.Unlock()
	c.ep.mu.Lock()
	if c.ep.streams[c.id] == c {
		delete(c.ep.streams, c.id)
		if !c.s.ours(c.id) {
			c.ep.peers--
		}
	}
	c.ep.mu.Unlock()
}

// abandon resets c and takes it out of its epoch.
func (c *conn) abandon() {
	c.mu.Lock()
	send := !c.reset && !c.gone && !c.dead
	c.reset = true
	c.mu.Unlock()
	if send {
		c.s.enqueue(c.ep, flagRST, c.id, 0, ctrlQueue)
	}
	c.remove()
}

// deadErr is why reads and writes fail once the epoch has ended.
func (c *conn) deadErr() error {
	<-c.ep.done
	return c.ep.err
}

func (c *conn) Read(p []byte) (int, error) {
	if c.closedFlag.Load() {
		return 0, net.ErrClosed
	}
	c.mu.Lock()
	c.rseq++
	me := c.rseq
	for {
		if c.filling || (c.directN > 0 && c.directFor != me) {
			c.rcond.Wait() // for the fill, or for its owner to take it
			continue
		}
		n := 0
		if c.directN > 0 {
			n, c.directN = c.directN, 0
			c.rcond.Broadcast() // other Reads wait for this one to take it
		} else {
			n = c.in.take(p)
		}
		if n > 0 {
			credit := c.consumed(n)
			c.mu.Unlock()
			if credit > 0 {
				c.s.enqueue(c.ep, 0, c.id, credit, ctrlSend)
			}
			return n, nil
		}
		var err error
		switch {
		case c.closed:
			err = net.ErrClosed
		case c.dead:
			c.mu.Unlock()
			return 0, c.deadErr()
		case c.recvFin:
			err = io.EOF
		case c.reset:
			err = ErrReset
		case len(p) == 0:
		case c.rexpired:
			err = fmt.Errorf("mux: %w", errDeadline)
		default:
			if c.waitBuf == nil {
				c.waitBuf, c.waitOwner = p, me
			}
			c.rcond.Wait()
			if c.waitOwner == me && !c.filling {
				c.waitBuf = nil
			}
			continue
		}
		c.mu.Unlock()
		return 0, err
	}
}

func (c *conn) Write(p []byte) (int, error) {
	if c.closedFlag.Load() {
		return 0, net.ErrClosed
	}
	total := 0
	for len(p) > 0 {
		c.mu.Lock()
		if err := c.awaitCredit(0); err != nil {
			return total, err
		}
		n := min(len(p), int(c.credit), maxFrame)
		c.credit -= uint32(n)
		c.inflight++
		c.mu.Unlock()
		err := c.s.writeData(c.ep, c.id, p[:n])
		c.sendDone()
		if err != nil {
			if err != ErrPeerRestarted {
				c.s.fail(fmt.Errorf("%w: write: %w", ErrClosed, err))
			}
			return total, c.deadErr()
		}
		total += n
		p = p[n:]
	}
	return total, nil
}

// awaitCredit waits, c.mu held, until the peer's credit exceeds need. On
// error, why c cannot send, c.mu has been released.
func (c *conn) awaitCredit(need int) error {
	var err error
	for err == nil && int(c.credit) <= need {
		err = c.writeErr()
		if err == nil {
			c.wcond.Wait()
		}
	}
	if err == nil {
		err = c.writeErr()
	}
	if err != nil {
		dead := c.dead
		c.mu.Unlock()
		if dead {
			err = c.deadErr()
		}
	}
	return err
}

// sendDone ends a frame's send (counted in inflight), sending the FIN
// that Close or CloseWrite left pending meanwhile.
func (c *conn) sendDone() {
	c.mu.Lock()
	c.inflight--
	fin := c.inflight == 0 && c.finPending
	if fin {
		c.finPending = false
	}
	complete := fin && c.recvFin
	c.mu.Unlock()
	if fin {
		c.s.enqueue(c.ep, flagFIN, c.id, 0, ctrlQueue)
	}
	if complete {
		c.remove()
	}
}

// writeErr says why c cannot send. c.mu is held.
func (c *conn) writeErr() error {
	switch {
	case c.closed:
		return net.ErrClosed
	case c.dead:
		return ErrClosed // the caller asks the epoch
	case c.reset:
		return ErrReset
	case c.sentFin:
		return fmt.Errorf("mux: write after CloseWrite: %w", io.ErrClosedPipe)
	case c.wexpir:
		return fmt.Errorf("mux: %w", errDeadline)
	}
	return nil
}

// finish ends our direction unless ended (or the stream is gone) and says
// whether to send the FIN now, which waits for frames Writes are sending,
// and whether the stream is complete. c.mu is held.
func (c *conn) finish() (send, complete bool) {
	if c.sentFin || c.reset || c.dead || c.gone {
		return false, false
	}
	c.sentFin = true
	c.ctimer = time.AfterFunc(streamCloseTimeout, c.abandon)
	c.wake()
	if c.inflight > 0 {
		c.finPending = true
		return false, false
	}
	return true, c.recvFin
}

// CloseWrite half-closes the stream: the peer reads EOF, this side can
// still read.
func (c *conn) CloseWrite() error {
	if c.closedFlag.Load() {
		return net.ErrClosed
	}
	c.mu.Lock()
	if c.dead {
		c.mu.Unlock()
		return c.deadErr()
	}
	send, complete := c.finish()
	c.mu.Unlock()
	if send {
		c.s.enqueue(c.ep, flagFIN, c.id, 0, ctrlQueue)
	}
	if complete {
		c.remove()
	}
	return nil
}

// Close closes both directions. What the peer still sends is dropped (its
// credit returned), so its writes do not stall on a full window.
func (c *conn) Close() error {
	first := false
	c.closeOnce.Do(func() {
		first = true
		c.closedFlag.Store(true)
		c.mu.Lock()
		c.closed = true
		if c.filling {
			c.s.br.Interrupt() // see expire
		}
		credit := c.consumed(c.in.n + c.directN)
		c.in, c.directN = ring{}, 0
		send, complete := c.finish()
		complete = complete || (c.sentFin && c.recvFin && !c.finPending)
		c.wake()
		c.mu.Unlock()
		if credit > 0 {
			c.s.enqueue(c.ep, 0, c.id, credit, ctrlQueue)
		}
		if send {
			c.s.enqueue(c.ep, flagFIN, c.id, 0, ctrlQueue)
		}
		if complete {
			c.remove()
		}
	})
	if !first {
		return net.ErrClosed
	}
	return nil
}

func (c *conn) LocalAddr() net.Addr  { return c.local }
func (c *conn) RemoteAddr() net.Addr { return c.remote }

func (c *conn) SetDeadline(t time.Time) error {
	if err := c.SetReadDeadline(t); err != nil {
		return err
	}
	return c.SetWriteDeadline(t)
}

func (c *conn) SetReadDeadline(t time.Time) error {
	return c.setDeadline(t, &c.rgen, &c.rexpired, &c.rtimer)
}

func (c *conn) SetWriteDeadline(t time.Time) error {
	return c.setDeadline(t, &c.wgen, &c.wexpir, &c.wtimer)
}

func (c *conn) setDeadline(t time.Time, gen *int, expired *bool, timer **time.Timer) error {
	if c.closedFlag.Load() {
		return net.ErrClosed
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	*gen++
	*expired = false
	if *timer != nil {
		(*timer).Stop()
		*timer = nil
	}
	if t.IsZero() {
		return nil
	}
	d := time.Until(t)
	if d <= 0 {
		c.expire(expired)
		return nil
	}
	g := *gen
	*timer = time.AfterFunc(d, func() {
		c.mu.Lock()
		if *gen == g {
			c.expire(expired)
		}
		c.mu.Unlock()
	})
	return nil
}

// expire marks a deadline passed. A Read waiting for the receive loop to
// fill its buffer is let go too: the peer may have stopped mid-frame, with
// the receive loop waiting for the rest. c.mu is held.
func (c *conn) expire(expired *bool) {
	*expired = true
	if expired == &c.rexpired && c.filling {
		c.s.br.Interrupt()
	}
	c.wake()
}
