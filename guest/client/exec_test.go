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

// fakeGuest answers each task stream with guest, which gets the stream's
// guest end after the start request was read.
func fakeGuest(t *testing.T, guest func(s *execwire.Stream, start *agentv1.ExecStart)) *Client {
	t.Helper()
	c, err := New(func(ctx context.Context, port uint32) (net.Conn, error) {
		if port != api.PortExec {
			return nil, errors.New("not the exec port")
		}
		host, g := net.Pipe()
		go func() {
			s := execwire.NewStream(g)
			defer s.Close()
			req, err := s.Recv()
			if err != nil {
				return
			}
			guest(s, req.GetStart())
		}()
		return host, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func out(s *execwire.Stream, k execwire.Kind, b string) {
	s.SendOutput(k, append(make([]byte, execwire.HeaderSize), b...))
}

func TestExecOutputAndExit(t *testing.T) {
	c := fakeGuest(t, func(s *execwire.Stream, start *agentv1.ExecStart) {
		s.Send(&agentv1.ExecEvent{Event: &agentv1.ExecEvent_Started{Started: &agentv1.Started{Pid: 9}}})
		out(s, execwire.KindStdout, strings.Join(start.GetArgv(), " "))
		out(s, execwire.KindStderr, "err")
		s.Send(&agentv1.ExecEvent{Event: &agentv1.ExecEvent_Exit{Exit: &agentv1.Exit{Code: 3, DurationMs: 7}}})
	})
	var stdout, stderr strings.Builder
	pid := 0
	exit, err := c.Exec(t.Context(), Spec{Argv: []string{"echo", "hi"}}, Stdio{Stdout: &stdout, Stderr: &stderr, Started: func(p int) { pid = p }})
	if err != nil || exit.Code != 3 || exit.Duration != 7*time.Millisecond || pid != 9 || stdout.String() != "echo hi" || stderr.String() != "err" {
		t.Fatalf("exit %+v err %v pid %d stdout %q stderr %q", exit, err, pid, stdout.String(), stderr.String())
	}
}

// The service tells a refused task from a lost one by these codes.
func TestExecErrors(t *testing.T) {
	for _, tt := range []struct {
		name  string
		guest func(s *execwire.Stream)
		code  agentv1.Code
		is    error
	}{
		{"command not found", func(s *execwire.Stream) {
			s.SendError(agentv1.Errorf(agentv1.Code_NOT_FOUND, "command not found: x"))
		}, agentv1.Code_NOT_FOUND, nil},
		{"error without a code", func(s *execwire.Stream) {
			s.Send(&agentv1.ExecEvent{Event: &agentv1.ExecEvent_Error{Error: &agentv1.Error{Message: "?"}}})
		}, agentv1.Code_UNKNOWN, nil},
		{"no exit", func(s *execwire.Stream) {}, agentv1.Code_UNKNOWN, ErrNoExit},
		{"impossible exit", func(s *execwire.Stream) {
			s.Send(&agentv1.ExecEvent{Event: &agentv1.ExecEvent_Exit{Exit: &agentv1.Exit{Code: 300}}})
		}, agentv1.Code_UNKNOWN, ErrBadExit},
		{"bad frame", func(s *execwire.Stream) {
			out(s, 7, "x")
		}, agentv1.Code_UNKNOWN, execwire.ErrFrame},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := fakeGuest(t, func(s *execwire.Stream, _ *agentv1.ExecStart) { tt.guest(s) })
			_, err := c.Exec(t.Context(), Spec{Argv: []string{"x"}}, Stdio{})
			if tt.is != nil && !errors.Is(err, tt.is) || tt.is == nil && agentv1.CodeOf(errors.Unwrap(err)) != tt.code {
				t.Fatalf("got %v, want code %v / %v", err, tt.code, tt.is)
			}
		})
	}
}

// Cancelling abandons the task: the guest sees its stream end, and the
// caller gets Canceled, not a protocol error.
func TestExecCancel(t *testing.T) {
	ended := make(chan struct{})
	c := fakeGuest(t, func(s *execwire.Stream, _ *agentv1.ExecStart) {
		s.Send(&agentv1.ExecEvent{Event: &agentv1.ExecEvent_Started{Started: &agentv1.Started{Pid: 1}}})
		for {
			if _, err := s.Recv(); err != nil {
				close(ended)
				return
			}
		}
	})
	ctx, cancel := context.WithCancel(t.Context())
	_, err := c.Exec(ctx, Spec{Argv: []string{"sleep"}}, Stdio{Started: func(int) { cancel() }})
	if agentv1.CodeOf(errors.Unwrap(err)) != agentv1.Code_CANCELED {
		t.Fatalf("got %v, want Canceled", err)
	}
	select {
	case <-ended:
	case <-time.After(10 * time.Second): // failure guard only
		t.Fatal("the guest's end of the stream did not end")
	}
}

// A transport that fails is Unavailable (the service may retry the task on
// the next VM), even when its error wraps io.EOF.
func TestExecTransportFailure(t *testing.T) {
	c, err := New(func(context.Context, uint32) (net.Conn, error) {
		return nil, errors.New("mux: dial port 1027: mux: too many open streams")
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Exec(t.Context(), Spec{Argv: []string{"x"}}, Stdio{}); agentv1.CodeOf(errors.Unwrap(err)) != agentv1.Code_UNAVAILABLE {
		t.Fatalf("dial failed: got %v, want Unavailable", err)
	}
	c2, _ := New(func(context.Context, uint32) (net.Conn, error) {
		return eofConn{}, nil
	})
	defer c2.Close()
	if _, err := c2.Exec(t.Context(), Spec{Argv: []string{"x"}}, Stdio{}); agentv1.CodeOf(errors.Unwrap(err)) != agentv1.Code_UNAVAILABLE {
		t.Fatalf("session died: got %v, want Unavailable", err)
	}
}

// eofConn is a stream of a transport that died: reads fail with an error
// wrapping io.EOF.
type eofConn struct{ net.Conn }

func (eofConn) Read([]byte) (int, error)    { return 0, errSessionEOF }
func (eofConn) Write(b []byte) (int, error) { return len(b), nil }
func (eofConn) Close() error                { return nil }

var errSessionEOF = errors.Join(errors.New("mux: session closed: peer hung up"), io.EOF)
