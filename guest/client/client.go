// Package client is the host's side of the guest agent contract: one Client
// speaks agent/v1 over whatever connection a backend produces (vsock, Hyper-V
// socket, or a multiplexed virtio-serial stream). Everything the guest sends
// is treated as untrusted: message sizes are bounded and a misbehaving agent
// yields errors, never panics.
package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/airlock-sandbox/airlock/guest/api"
	agentv1 "github.com/airlock-sandbox/airlock/guest/api/agent/v1"
	"github.com/airlock-sandbox/airlock/guest/api/execwire"
)

// MaxMessageSize bounds every message the host accepts from the guest.
const MaxMessageSize = execwire.MaxPayload

// DialFunc opens a new stream to a port of the guest (api.PortAgent,
// api.PortExec).
type DialFunc func(ctx context.Context, port uint32) (net.Conn, error)

// Client reaches one guest agent: a stream of its own per agent call and
// per task, each dialled through dial. It holds no connection, and is safe
// for concurrent use.
type Client struct {
	dial DialFunc
}

// New returns a client that reaches the agent through dial. It does not
// connect until the first call.
func New(dial DialFunc) (*Client, error) {
	return &Client{dial: dial}, nil
}

// Close releases nothing: each call's stream ends with the call. It is
// here so that a Client is closed like the connection it used to hold.
func (c *Client) Close() error { return nil }

// Info reports the guest's state.
//
// Errors, for Info, SetTime and Shutdown alike, are gRPC status errors
// wrapped with the call's name: the agent's own code (Unimplemented: a
// call it does not serve, InvalidArgument, Internal); Unavailable when
// the guest could not be reached or ended the stream without an answer;
// Canceled or DeadlineExceeded when ctx ended first (an agent that answers
// nothing); execwire.ErrFrame for a guest breaking the protocol.
func (c *Client) Info(ctx context.Context) (*agentv1.InfoResponse, error) {
	resp, err := c.call(ctx, &agentv1.AgentRequest{Call: &agentv1.AgentRequest_Info{Info: &agentv1.InfoRequest{}}})
	if err == nil && resp.GetInfo() == nil {
		err = wrongAnswer(resp)
	}
	if err != nil {
		return nil, fmt.Errorf("agent info: %w", err)
	}
	return resp.GetInfo(), nil
}

// SetTime sets the guest's wall clock.
func (c *Client) SetTime(ctx context.Context, t time.Time) error {
	resp, err := c.call(ctx, &agentv1.AgentRequest{Call: &agentv1.AgentRequest_SetTime{SetTime: &agentv1.SetTimeRequest{UnixNanos: t.UnixNano()}}})
	if err == nil && resp.GetSetTime() == nil {
		err = wrongAnswer(resp)
	}
	if err != nil {
		return fmt.Errorf("agent set time: %w", err)
	}
	return nil
}

// Shutdown asks the guest to power off (or reboot). The agent answers before
// it powers off; the caller then waits for the machine to stop.
func (c *Client) Shutdown(ctx context.Context, reboot bool) error {
	resp, err := c.call(ctx, &agentv1.AgentRequest{Call: &agentv1.AgentRequest_Shutdown{Shutdown: &agentv1.ShutdownRequest{Reboot: reboot}}})
	if err == nil && resp.GetShutdown() == nil {
		err = wrongAnswer(resp)
	}
	if err != nil {
		return fmt.Errorf("agent shutdown: %w", err)
	}
	return nil
}

// call makes one agent call on a stream of its own: the request out, one
// answer back. An answer that is an Error comes back as its status error.
func (c *Client) call(ctx context.Context, req *agentv1.AgentRequest) (*agentv1.AgentResponse, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	conn, err := c.dial(ctx, api.PortAgent)
	if err != nil {
		return nil, callErr(ctx, err)
	}
	defer conn.Close()
	// Closing the stream is what ends a read or write waiting on a guest
	// that stopped answering.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	b, err := execwire.AppendMessage(nil, execwire.KindRequest, req)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Write(b); err != nil {
		return nil, callErr(ctx, err)
	}
	r := execwire.NewReader(conn)
	k, n, err := r.Next()
	if err == io.EOF && ctx.Err() == nil {
		return nil, status.Error(codes.Unavailable, "the agent ended the call without an answer")
	}
	if err == nil && k != execwire.KindEvent {
		err = fmt.Errorf("%w: a %s frame from the guest", execwire.ErrFrame, k)
	}
	var resp agentv1.AgentResponse
	if err == nil {
		err = r.Message(n, &resp)
	}
	if err != nil {
		return nil, callErr(ctx, err)
	}
	if e := resp.GetError(); e != nil {
		return nil, guestError(e)
	}
	return &resp, nil
}

// guestError is an Error the guest reported, as the gRPC status error its
// code names (an OK code, which no error has, is Unknown).
func guestError(e *agentv1.Error) error {
	code := codes.Code(e.GetCode())
	if code == codes.OK {
		code = codes.Unknown
	}
	return status.Error(code, e.GetMessage())
}

// callErr says why a call's stream failed: the call was abandoned, the
// guest broke the protocol, or the transport broke.
func callErr(ctx context.Context, err error) error {
	switch {
	case ctx.Err() != nil:
		return status.FromContextError(ctx.Err()).Err()
	case errors.Is(err, execwire.ErrFrame):
		return err
	}
	return status.Error(codes.Unavailable, err.Error())
}

// wrongAnswer is the guest answering a call with another call's result.
func wrongAnswer(resp *agentv1.AgentResponse) error {
	return fmt.Errorf("%w: an answer of type %T", execwire.ErrFrame, resp.GetResult())
}

// ErrNoExit means the agent ended a task's stream without an exit status.
var ErrNoExit = errors.New("guest agent ended the task without an exit status")
