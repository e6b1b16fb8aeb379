package client

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/guest/api"
	agentv1 "github.com/airlock-sandbox/airlock/guest/api/agent/v1"
	"github.com/airlock-sandbox/airlock/guest/api/execwire"
)

// callGuest answers each agent call's stream with guest, which gets the
// guest's end of the stream.
func callGuest(t *testing.T, guest func(c net.Conn)) *Client {
	t.Helper()
	c, _ := New(func(ctx context.Context, port uint32) (net.Conn, error) {
		if port != api.PortAgent {
			return nil, errors.New("not the agent port")
		}
		host, g := net.Pipe()
		go func() {
			defer g.Close()
			guest(g)
		}()
		return host, nil
	})
	return c
}

type testAgent struct{ execwire.UnimplementedAgent }

func (testAgent) Info(context.Context, *agentv1.InfoRequest) (*agentv1.InfoResponse, error) {
	return &agentv1.InfoResponse{AgentVersion: "t", AgentInstance: 42}, nil
}

func (testAgent) SetTime(_ context.Context, r *agentv1.SetTimeRequest) (*agentv1.SetTimeResponse, error) {
	if r.GetUnixNanos() <= 0 {
		return nil, agentv1.Errorf(agentv1.Code_INVALID_ARGUMENT, "bad time")
	}
	return nil, nil // an empty answer is still an answer
}

// serveOne answers one call the way the agent does.
func serveOne(a execwire.Agent) func(net.Conn) {
	return func(c net.Conn) {
		r := execwire.NewReader(c)
		_, n, err := r.Next()
		if err != nil {
			return
		}
		var req agentv1.AgentRequest
		if r.Message(n, &req) != nil {
			return
		}
		b, _ := execwire.AppendMessage(nil, execwire.KindEvent, execwire.Dispatch(context.Background(), a, &req, nil))
		c.Write(b)
	}
}

func TestCalls(t *testing.T) {
	c := callGuest(t, serveOne(testAgent{}))
	info, err := c.Info(t.Context())
	if err != nil || info.GetAgentVersion() != "t" || info.GetAgentInstance() != 42 {
		t.Fatalf("info %v %v", info, err)
	}
	if err := c.SetTime(t.Context(), time.Now()); err != nil {
		t.Fatalf("set time: %v", err)
	}
	if err := c.SetTime(t.Context(), time.Unix(0, 0)); agentv1.CodeOf(err) != agentv1.Code_INVALID_ARGUMENT || !strings.Contains(err.Error(), "bad time") {
		t.Fatalf("set time 0: %v", err)
	}
	// Callers tell an agent that cannot power off by this code.
	if err := c.Shutdown(t.Context(), false); agentv1.CodeOf(err) != agentv1.Code_UNIMPLEMENTED || !strings.HasPrefix(err.Error(), "agent shutdown: ") {
		t.Fatalf("shutdown: %v", err)
	}
}

// The session counts an agent that stopped answering by these codes, and
// must never be handed a panic or an unbounded read by a hostile guest.
func TestCallErrors(t *testing.T) {
	readRequest := func(c net.Conn) {
		r := execwire.NewReader(c)
		if _, n, err := r.Next(); err == nil {
			r.Payload(n)
		}
	}
	answer := func(m *agentv1.AgentResponse) func(net.Conn) {
		return func(c net.Conn) {
			readRequest(c)
			b, _ := execwire.AppendMessage(nil, execwire.KindEvent, m)
			c.Write(b)
		}
	}
	for _, tt := range []struct {
		name    string
		guest   func(net.Conn)
		timeout time.Duration
		code    agentv1.Code
		is      error
	}{
		{"closed without an answer", func(c net.Conn) { readRequest(c) }, 0, agentv1.Code_UNAVAILABLE, nil},
		{"mute", func(c net.Conn) { readRequest(c); io.Copy(io.Discard, c) }, 50 * time.Millisecond, agentv1.Code_DEADLINE_EXCEEDED, nil},
		{"error without a code", answer(&agentv1.AgentResponse{Result: &agentv1.AgentResponse_Error{Error: &agentv1.Error{Message: "?"}}}), 0, agentv1.Code_UNKNOWN, nil},
		{"code out of range", answer(&agentv1.AgentResponse{Result: &agentv1.AgentResponse_Error{Error: &agentv1.Error{Code: 9999, Message: strings.Repeat("e", 1<<20)}}}), 0, agentv1.Code_UNKNOWN, nil},
		{"another call's answer", answer(&agentv1.AgentResponse{Result: &agentv1.AgentResponse_SetTime{SetTime: &agentv1.SetTimeResponse{}}}), 0, agentv1.Code_UNKNOWN, execwire.ErrFrame},
		{"no answer at all", answer(&agentv1.AgentResponse{}), 0, agentv1.Code_UNKNOWN, execwire.ErrFrame},
		{"output frame", func(c net.Conn) {
			readRequest(c)
			b := make([]byte, execwire.HeaderSize+2)
			execwire.PutHeader(b, execwire.KindStdout, 2)
			c.Write(b)
		}, 0, agentv1.Code_UNKNOWN, execwire.ErrFrame},
		{"oversized", func(c net.Conn) {
			readRequest(c)
			b := make([]byte, execwire.HeaderSize)
			execwire.PutHeader(b, execwire.KindEvent, execwire.MaxPayload+1)
			c.Write(b)
		}, 0, agentv1.Code_UNKNOWN, execwire.ErrFrame},
		{"not protobuf", func(c net.Conn) {
			readRequest(c)
			b := append(make([]byte, execwire.HeaderSize), 0xff, 0xff)
			execwire.PutHeader(b, execwire.KindEvent, 2)
			c.Write(b)
		}, 0, agentv1.Code_UNKNOWN, execwire.ErrFrame},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := t.Context()
			if tt.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.timeout)
				defer cancel()
			}
			_, err := callGuest(t, tt.guest).Info(ctx)
			if err == nil || agentv1.CodeOf(err) != tt.code || (tt.is != nil && !errors.Is(err, tt.is)) || !strings.HasPrefix(err.Error(), "agent info: ") {
				t.Fatalf("got %v (%v), want %v %v", err, agentv1.CodeOf(err), tt.code, tt.is)
			}
			if len(err.Error()) > 2*maxGuestMessage {
				t.Errorf("a guest's message of %d bytes passed on unbounded", len(err.Error()))
			}
		})
	}
}

// A guest that cannot be reached at all: the dial's failure is Unavailable.
func TestCallDialFails(t *testing.T) {
	c, _ := New(func(context.Context, uint32) (net.Conn, error) { return nil, errors.New("connection refused") })
	if _, err := c.Info(t.Context()); agentv1.CodeOf(err) != agentv1.Code_UNAVAILABLE {
		t.Fatalf("got %v", err)
	}
}
