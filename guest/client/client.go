// Package client is the host's side of the guest agent contract: one Client
// speaks agent/v1 over whatever connection a backend produces (vsock, Hyper-V
// socket, or a multiplexed virtio-serial stream). Everything the guest sends
// is treated as untrusted: message sizes are bounded and a misbehaving agent
// yields errors, never panics.
package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/guest/api"
	agentv1 "github.com/airlock-sandbox/airlock/guest/api/agent/v1"
	"github.com/airlock-sandbox/airlock/guest/api/execwire"
	"github.com/airlock-sandbox/airlock/internal/printable"
)

// MaxMessageSize bounds every message the host accepts from the guest.
const MaxMessageSize = execwire.MaxPayload

// DialFunc opens a new stream to a port of the guest (api.PortAgent,
// api.PortExec).
type DialFunc func(ctx context.Context, port uint32) (net.Conn, error)

// Client reaches one guest agent. Agent calls share one stream that the
// client keeps (dialled at the first call, dialled again once it fails);
// each task has a stream of its own, taken from a spare the client dials
// ahead of time when it has one. It is safe for concurrent use.
type Client struct {
	dial DialFunc
	// ctx ends at Close: it bounds the dial of a spare stream.
	ctx    context.Context
	cancel context.CancelFunc

	// calls is held (a token in it) by the call using the call stream;
	// one call at a time, waiting for it ends with the caller's context.
	calls chan struct{}

	mu      sync.Mutex
	cs      *callStream // the kept call stream, or nil
	spare   net.Conn    // a task stream dialled ahead, or nil
	dialing bool        // a spare is being dialled
	closed  bool
}

// New returns a client that reaches the agent through dial. It does not
// connect until the first call.
func New(dial DialFunc) (*Client, error) {
	ctx, cancel := context.WithCancel(context.Background())
	return &Client{dial: dial, ctx: ctx, cancel: cancel, calls: make(chan struct{}, 1)}, nil
}

// Close closes the kept call stream (a call on it fails) and the spare
// task stream; running tasks keep theirs. Calls and tasks after Close
// still work, each on a stream of its own that ends with it.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	cs, spare := c.cs, c.spare
	c.cs, c.spare = nil, nil
	c.mu.Unlock()
	c.cancel()
	if cs != nil {
		cs.conn.Close()
	}
	if spare != nil {
		spare.Close()
	}
	return nil
}

// Info reports the guest's state.
//
// Errors, for Info, SetTime, TrustCA and Shutdown alike, are wrapped with
// the call's name and match agentv1's sentinels with errors.Is: the
// agent's own *agentv1.Error (ErrUnimplemented: a call it does not serve,
// ErrInvalidArgument, ErrInternal); ErrUnavailable when the guest could
// not be reached or ended the stream without an answer; ctx's error
// (ErrCanceled, ErrDeadlineExceeded) when ctx ended first (an agent that
// answers nothing); execwire.ErrFrame for a guest breaking the protocol.
func (c *Client) Info(ctx context.Context) (*agentv1.InfoResponse, error) {
	resp, err := c.call(ctx, &agentv1.AgentRequest{Call: &agentv1.AgentRequest_Info{Info: &agentv1.InfoRequest{}}},
		func(r *agentv1.AgentResponse) bool { return r.GetInfo() != nil })
	if err != nil {
		return nil, fmt.Errorf("agent info: %w", err)
	}
	return resp.GetInfo(), nil
}

// SetTime sets the guest's wall clock.
func (c *Client) SetTime(ctx context.Context, t time.Time) error {
	_, err := c.call(ctx, &agentv1.AgentRequest{Call: &agentv1.AgentRequest_SetTime{SetTime: &agentv1.SetTimeRequest{UnixNanos: t.UnixNano()}}},
		func(r *agentv1.AgentResponse) bool { return r.GetSetTime() != nil })
	if err != nil {
		return fmt.Errorf("agent set time: %w", err)
	}
	return nil
}

// TrustCA makes the guest trust the CA certificate pem (the host's
// installation CA): the agent writes it to api.CAFile and appends it to the
// system bundle, api.CABundle.
func (c *Client) TrustCA(ctx context.Context, pem []byte) error {
	_, err := c.call(ctx, &agentv1.AgentRequest{Call: &agentv1.AgentRequest_TrustCa{TrustCa: &agentv1.TrustCARequest{Pem: pem}}},
		func(r *agentv1.AgentResponse) bool { return r.GetTrustCa() != nil })
	if err != nil {
		return fmt.Errorf("agent trust CA: %w", err)
	}
	return nil
}

// Shutdown asks the guest to power off (or reboot). The agent answers before
// it powers off; the caller then waits for the machine to stop.
func (c *Client) Shutdown(ctx context.Context, reboot bool) error {
	_, err := c.call(ctx, &agentv1.AgentRequest{Call: &agentv1.AgentRequest_Shutdown{Shutdown: &agentv1.ShutdownRequest{Reboot: reboot}}},
		func(r *agentv1.AgentResponse) bool { return r.GetShutdown() != nil })
	if err != nil {
		return fmt.Errorf("agent shutdown: %w", err)
	}
	return nil
}

// call makes one agent call on the kept call stream: the request out, one
// answer back, which is an Error (returned as the error) or one
// that ok accepts. A call that fails in any other way closes the stream,
// so that nothing the guest sent for it is taken for the next call's
// answer; the next call dials a new one.
func (c *Client) call(ctx context.Context, req *agentv1.AgentRequest, ok func(*agentv1.AgentResponse) bool) (*agentv1.AgentResponse, error) {
	b, err := execwire.AppendMessage(nil, execwire.KindRequest, req)
	if err != nil {
		return nil, err
	}
	select {
	case c.calls <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-c.calls }()
	for retried := false; ; retried = true {
		cs, kept, err := c.callStream(ctx)
		if err != nil {
			return nil, callErr(ctx, err)
		}
		resp, err := cs.roundTrip(ctx, b)
		if err == nil && resp.GetError() == nil && !ok(resp) {
			c.dropCallStream(cs)
			return nil, wrongAnswer(resp)
		}
		if err == nil {
			c.mu.Lock()
			if c.closed {
				cs.conn.Close() // after Close nothing is kept
			}
			c.mu.Unlock()
			if e := resp.GetError(); e != nil {
				return nil, guestError(e)
			}
			return resp, nil
		}
		c.dropCallStream(cs)
		// A kept stream that broke before it answered, with the caller
		// still waiting: the agent may have restarted (a stream of the
		// old one fails), or ended the stream while it was idle. Ask once
		// more on a new stream. Every call is safe to repeat.
		if kept && !retried && ctx.Err() == nil && !errors.Is(err, execwire.ErrFrame) {
			continue
		}
		if err == io.EOF && ctx.Err() == nil {
			return nil, agentv1.Errorf(agentv1.Code_UNAVAILABLE, "the agent ended the call without an answer")
		}
		return nil, callErr(ctx, err)
	}
}

// callStream returns the kept call stream (kept is set), or dials one.
// The caller holds c.calls.
func (c *Client) callStream(ctx context.Context) (cs *callStream, kept bool, err error) {
	c.mu.Lock()
	cs = c.cs
	c.mu.Unlock()
	if cs != nil {
		if cs.usable() {
			return cs, true, nil
		}
		c.dropCallStream(cs) // ended while idle
	}
	conn, err := c.dial(ctx, api.PortAgent)
	if err != nil {
		return nil, false, err
	}
	cs = newCallStream(conn)
	c.mu.Lock()
	if !c.closed {
		c.cs = cs
	}
	c.mu.Unlock()
	return cs, false, nil
}

// dropCallStream closes cs and forgets it if it is the kept one.
func (c *Client) dropCallStream(cs *callStream) {
	cs.conn.Close()
	c.mu.Lock()
	if c.cs == cs {
		c.cs = nil
	}
	c.mu.Unlock()
}

// callStream is a stream for agent calls, with a reader that hands each
// answer to the call waiting for it. An answer that no call waits for is
// the guest breaking the protocol, and ends the stream.
type callStream struct {
	conn    net.Conn
	answers chan *agentv1.AgentResponse // holds at most the one answer
	done    chan struct{}               // closed when the reader has ended
	err     error                       // why it ended; set before done

	mu      sync.Mutex
	waiting bool // a call was sent and its answer has not come
	broken  bool // the guest sent more than the last answer: no next call
}

func newCallStream(conn net.Conn) *callStream {
	cs := &callStream{conn: conn, answers: make(chan *agentv1.AgentResponse, 1), done: make(chan struct{})}
	go cs.read()
	return cs
}

// usable reports whether a call may be sent on cs.
func (cs *callStream) usable() bool {
	select {
	case <-cs.done:
		return false
	default:
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return !cs.broken
}

func (cs *callStream) read() {
	defer close(cs.done)
	defer cs.conn.Close()
	// Buffered, to see what came with an answer (below).
	br := bufio.NewReaderSize(cs.conn, 4<<10)
	r := execwire.NewReader(br)
	for {
		k, n, err := r.Next()
		if err == nil && k != execwire.KindEvent {
			err = fmt.Errorf("%w: a %s frame from the guest", execwire.ErrFrame, k)
		}
		resp := new(agentv1.AgentResponse)
		if err == nil {
			err = r.Message(n, resp)
		}
		if err == nil {
			cs.mu.Lock()
			if !cs.waiting {
				err = fmt.Errorf("%w: an answer to no call", execwire.ErrFrame)
			}
			cs.waiting = false
			cs.mu.Unlock()
		}
		if err != nil {
			cs.err = err
			return
		}
		if br.Buffered() > 0 {
			// Bytes that came with the answer: nothing may follow an
			// answer before the next request. Caught now, they cannot be
			// taken for the next call's answer however soon it is sent
			// (a stray read later, with a call waiting, could be): the
			// stream is marked before the answer is handed over, so the
			// next call dials a new one.
			cs.mu.Lock()
			cs.broken = true
			cs.mu.Unlock()
			cs.err = fmt.Errorf("%w: more after an answer", execwire.ErrFrame)
			cs.answers <- resp
			return
		}
		cs.answers <- resp // never blocks: one answer per call sent
	}
}

// roundTrip sends the framed request b and waits for its answer. The
// caller's context ending closes the stream, which is what ends a write
// or a wait on a guest that stopped answering.
func (cs *callStream) roundTrip(ctx context.Context, b []byte) (*agentv1.AgentResponse, error) {
	stop := context.AfterFunc(ctx, func() { cs.conn.Close() })
	defer stop()
	cs.mu.Lock()
	cs.waiting = true
	cs.mu.Unlock()
	if _, err := cs.conn.Write(b); err != nil {
		return nil, err
	}
	select {
	case resp := <-cs.answers:
		return resp, nil
	case <-cs.done:
		select {
		case resp := <-cs.answers: // came just before the end
			return resp, nil
		default:
		}
		return nil, cs.err
	}
}

// guestError is an Error the guest reported, its message bounded and
// escaped (it is guest-chosen text) and its code as this host knows it
// (UNKNOWN for OK, which no error has, or a code not in agentv1's table).
func guestError(e *agentv1.Error) error {
	msg := e.GetMessage()
	if len(msg) > maxGuestMessage {
		msg = msg[:maxGuestMessage] + "..."
	}
	return &agentv1.Error{Code: agentv1.CodeOf(e), Message: printable.String(msg)}
}

// callErr says why a call's stream failed: the call was abandoned, the
// guest broke the protocol, or the transport broke.
func callErr(ctx context.Context, err error) error {
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, execwire.ErrFrame):
		return err
	}
	return fmt.Errorf("%w: %w", agentv1.ErrUnavailable, err)
}

// wrongAnswer is the guest answering a call with another call's result.
func wrongAnswer(resp *agentv1.AgentResponse) error {
	return fmt.Errorf("%w: an answer of type %T", execwire.ErrFrame, resp.GetResult())
}

// ErrNoExit means the agent ended a task's stream without an exit status.
var ErrNoExit = errors.New("guest agent ended the task without an exit status")
