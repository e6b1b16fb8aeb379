package hcs

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// Client speaks the protocol to airlock-vmservice. The zero value is not
// usable: Dial must open a connection to the service (the named pipe on
// Windows, a net.Pipe in tests).
type Client struct {
	Dial func(ctx context.Context) (net.Conn, error)
}

// Session is the connection that created a VM; the VM lives while it is
// open. Its methods are safe for concurrent use (requests are serialised).
type Session struct {
	mu   sync.Mutex
	conn net.Conn
	r    *bufio.Reader
	id   string
	// broken is set once a request failed mid-way (ctx, I/O): the stream
	// may hold a late answer, so no further request is sent on it.
	broken error
}

// Create asks the service for a VM and returns its session and ids.
func (c *Client) Create(ctx context.Context, req CreateRequest) (*Session, VMInfo, error) {
	conn, err := c.Dial(ctx)
	if err != nil {
		return nil, VMInfo{}, err
	}
	s := &Session{conn: conn, r: bufio.NewReader(conn)}
	resp, err := s.roundTrip(ctx, Request{Op: OpCreateVM, Create: &req})
	if err != nil {
		conn.Close()
		return nil, VMInfo{}, fmt.Errorf("hcs: create: %w", err)
	}
	if resp.VM == nil || !ValidGUID(resp.VM.ID) || !ValidGUID(resp.VM.RuntimeID) {
		conn.Close()
		return nil, VMInfo{}, errors.New("hcs: create: the service's answer has no valid VM ids")
	}
	s.id = resp.VM.ID
	return s, *resp.VM, nil
}

// ID is the compute system id.
func (s *Session) ID() string { return s.id }

// Start boots the VM and adds its workspace share.
func (s *Session) Start(ctx context.Context) error {
	_, err := s.roundTrip(ctx, Request{Op: OpStartVM, ID: s.id})
	if err != nil {
		return fmt.Errorf("hcs: start: %w", err)
	}
	return nil
}

// Stop terminates the VM.
func (s *Session) Stop(ctx context.Context) error {
	_, err := s.roundTrip(ctx, Request{Op: OpStopVM, ID: s.id})
	if err != nil {
		return fmt.Errorf("hcs: stop: %w", err)
	}
	return nil
}

// Status asks for the VM's state.
func (s *Session) Status(ctx context.Context) (VMInfo, error) {
	resp, err := s.roundTrip(ctx, Request{Op: OpStatusVM, ID: s.id})
	if err != nil {
		return VMInfo{}, fmt.Errorf("hcs: status: %w", err)
	}
	if resp.VM == nil {
		return VMInfo{}, errors.New("hcs: status: the service's answer has no VM")
	}
	return *resp.VM, nil
}

// Close ends the session; the service terminates the VM if it still runs.
func (s *Session) Close() error { return s.conn.Close() }

func (s *Session) roundTrip(ctx context.Context, req Request) (Response, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broken != nil {
		return Response{}, fmt.Errorf("the session to the service ended: %w", s.broken)
	}
	resp, err := roundTrip(ctx, s.conn, s.r, req)
	var we *wireErr
	if err != nil && !errors.As(err, &we) {
		s.broken = err
	}
	return resp, err
}

// Wait blocks until the VM id has exited, on a connection of its own.
func (c *Client) Wait(ctx context.Context, id string) (Exit, error) {
	conn, err := c.Dial(ctx)
	if err != nil {
		return Exit{}, err
	}
	defer conn.Close()
	resp, err := roundTrip(ctx, conn, bufio.NewReader(conn), Request{Op: OpWaitVM, ID: id})
	if err != nil {
		return Exit{}, fmt.Errorf("hcs: wait: %w", err)
	}
	if resp.Exit == nil {
		return Exit{}, errors.New("hcs: wait: the service's answer has no exit")
	}
	return *resp.Exit, nil
}

// roundTrip sends req and reads its response, giving up when ctx is done.
func roundTrip(ctx context.Context, conn net.Conn, r *bufio.Reader, req Request) (Response, error) {
	req.V = ProtocolVersion
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer func() {
		if stop() {
			_ = conn.SetDeadline(time.Time{})
		}
	}()
	var resp Response
	err := WriteMessage(conn, req)
	if err == nil {
		err = ReadMessage(r, &resp)
	}
	if err != nil {
		if ctx.Err() != nil {
			return resp, ctx.Err()
		}
		return resp, err
	}
	if resp.V != ProtocolVersion {
		return resp, fmt.Errorf("%w: the service speaks protocol version %d, this app %d; reinstall Airlock", ErrRefused, resp.V, ProtocolVersion)
	}
	if resp.Error != nil {
		return resp, &wireErr{resp.Error.Err()}
	}
	return resp, nil
}

// wireErr marks an error the service answered with (the stream is intact).
type wireErr struct{ err error }

func (e *wireErr) Error() string { return e.err.Error() }
func (e *wireErr) Unwrap() error { return e.err }
