package execwire

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	agentv1 "github.com/airlock-sandbox/airlock/guest/api/agent/v1"
)

type panicky struct {
	UnimplementedAgent
	ctxDone chan struct{}
}

func (panicky) Info(context.Context, *agentv1.InfoRequest) (*agentv1.InfoResponse, error) {
	panic("boom")
}

func (p panicky) SetTime(ctx context.Context, _ *agentv1.SetTimeRequest) (*agentv1.SetTimeResponse, error) {
	<-ctx.Done() // until the host abandons the call
	close(p.ctxDone)
	return nil, ctx.Err()
}

func (panicky) Shutdown(context.Context, *agentv1.ShutdownRequest) (*agentv1.ShutdownResponse, error) {
	return nil, nil
}

func serveAgentTest(t *testing.T, a Agent, onPanic func(string, any)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- ServeAgent(l, a, onPanic) }()
	t.Cleanup(func() {
		l.Close()
		if err := <-done; err != nil {
			t.Errorf("ServeAgent after Close: %v", err)
		}
	})
	return l.Addr().String()
}

// call sends raw as the request and returns the answer, or nil when the
// guest ended the stream without one.
func call(t *testing.T, addr string, raw []byte) *agentv1.AgentResponse {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	c.Write(raw)
	c.(*net.TCPConn).CloseWrite() // a cut frame ends here, not at CallTimeout
	r := NewReader(c)
	k, n, err := r.Next()
	if err != nil {
		return nil // the end, or a reset: the guest closed with input unread
	}
	if k != KindEvent {
		t.Fatalf("answer: %s %v", k, err)
	}
	var resp agentv1.AgentResponse
	if err := r.Message(n, &resp); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.Next(); err != io.EOF {
		t.Fatalf("after the answer: %v, want the stream's end", err)
	}
	return &resp
}

func request(t *testing.T, req *agentv1.AgentRequest) []byte {
	b, err := AppendMessage(nil, KindRequest, req)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestServeAgent(t *testing.T) {
	var panics atomic.Int32
	addr := serveAgentTest(t, panicky{}, func(call string, r any) {
		if call == "Info" && fmt.Sprint(r) == "boom" {
			panics.Add(1)
		}
	})
	// A panic is answered with Internal, and the agent goes on serving.
	for range 2 {
		resp := call(t, addr, request(t, &agentv1.AgentRequest{Call: &agentv1.AgentRequest_Info{Info: &agentv1.InfoRequest{}}}))
		if e := resp.GetError(); e.GetCode() != agentv1.Code_INTERNAL || e.GetMessage() != "agent: internal error in Info" {
			t.Fatalf("panicking Info answered %v", resp)
		}
	}
	if panics.Load() != 2 {
		t.Fatalf("onPanic saw %d panics", panics.Load())
	}
	// A handler's nil answer is an empty one, not no answer.
	if resp := call(t, addr, request(t, &agentv1.AgentRequest{Call: &agentv1.AgentRequest_Shutdown{Shutdown: &agentv1.ShutdownRequest{}}})); resp.GetShutdown() == nil {
		t.Fatalf("shutdown answered %v", resp)
	}
	// A call this agent does not know (one from a newer host), or none.
	if resp := call(t, addr, request(t, &agentv1.AgentRequest{})); resp.GetError().GetCode() != agentv1.Code_UNIMPLEMENTED {
		t.Fatalf("empty request answered %v", resp)
	}
	// What is not a request gets no answer, only the stream's end.
	out := make([]byte, HeaderSize+1)
	PutHeader(out, KindStdout, 1)
	notProto := append(make([]byte, HeaderSize), 0xff, 0xff)
	PutHeader(notProto, KindRequest, 2)
	big := make([]byte, HeaderSize)
	PutHeader(big, KindRequest, MaxPayload+1)
	for name, raw := range map[string][]byte{"output frame": out, "not protobuf": notProto, "oversized": big, "cut": {1, 0}} {
		if resp := call(t, addr, raw); resp != nil {
			t.Fatalf("%s answered %v", name, resp)
		}
	}
}

// One stream carries calls one after another, each answered in turn; the
// stream waits between calls, and a bad frame ends it.
func TestServeAgentSeveralCalls(t *testing.T) {
	addr := serveAgentTest(t, panicky{}, nil)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	r := NewReader(c)
	next := func() *agentv1.AgentResponse {
		t.Helper()
		k, n, err := r.Next()
		if err != nil || k != KindEvent {
			t.Fatalf("answer: %s %v", k, err)
		}
		var resp agentv1.AgentResponse
		if err := r.Message(n, &resp); err != nil {
			t.Fatal(err)
		}
		return &resp
	}
	shutdown := request(t, &agentv1.AgentRequest{Call: &agentv1.AgentRequest_Shutdown{Shutdown: &agentv1.ShutdownRequest{}}})
	unknown := request(t, &agentv1.AgentRequest{})
	for i := range 3 {
		c.Write(shutdown)
		if resp := next(); resp.GetShutdown() == nil {
			t.Fatalf("call %d answered %v", i, resp)
		}
		if i == 1 {
			time.Sleep(50 * time.Millisecond) // the stream waits for the host
		}
	}
	// Two calls sent at once are answered in order.
	c.Write(append(append([]byte(nil), unknown...), shutdown...))
	if resp := next(); resp.GetError().GetCode() != agentv1.Code_UNIMPLEMENTED {
		t.Fatalf("first of two answered %v", resp)
	}
	if resp := next(); resp.GetShutdown() == nil {
		t.Fatalf("second of two answered %v", resp)
	}
	out := make([]byte, HeaderSize+1)
	PutHeader(out, KindStdout, 1)
	c.Write(out)
	if _, _, err := r.Next(); err == nil {
		t.Fatal("a bad frame after calls did not end the stream")
	}
}

// The call's context ends when the host closes the stream.
func TestServeAgentAbandoned(t *testing.T) {
	a := panicky{ctxDone: make(chan struct{})}
	addr := serveAgentTest(t, a, nil)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	c.Write(request(t, &agentv1.AgentRequest{Call: &agentv1.AgentRequest_SetTime{SetTime: &agentv1.SetTimeRequest{UnixNanos: 1}}}))
	time.Sleep(10 * time.Millisecond)
	c.Close()
	select {
	case <-a.ctxDone:
	case <-time.After(10 * time.Second):
		t.Fatal("the call's context did not end with the stream")
	}
}
