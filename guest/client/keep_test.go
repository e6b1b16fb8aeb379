package client

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/guest/api"
	agentv1 "github.com/airlock-sandbox/airlock/guest/api/agent/v1"
	"github.com/airlock-sandbox/airlock/guest/api/execwire"
)

// streams is a fake guest that counts the streams dialled to it and
// serves the n-th (from 1) with serve(n, conn).
type streams struct {
	dials atomic.Int32
	open  atomic.Int32 // guest ends not yet returned
	serve func(n int32, c net.Conn)
}

func (s *streams) dial(ctx context.Context, port uint32) (net.Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	n := s.dials.Add(1)
	host, g := net.Pipe()
	s.open.Add(1)
	go func() {
		defer s.open.Add(-1)
		defer g.Close()
		s.serve(n, g)
	}()
	return host, nil
}

// eventually polls cond until it holds (or fails the test after a long
// while: this is no timing assertion, only a bound on a broken test).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(20 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%s: never happened", what)
		}
	}
}

// serveCalls answers every call on the stream, as the agent does.
func serveCalls(a execwire.Agent) func(int32, net.Conn) {
	return func(_ int32, c net.Conn) {
		r := execwire.NewReader(c)
		for {
			_, n, err := r.Next()
			if err != nil {
				return
			}
			var req agentv1.AgentRequest
			if r.Message(n, &req) != nil {
				return
			}
			b, _ := execwire.AppendMessage(nil, execwire.KindEvent, execwire.Dispatch(context.Background(), a, &req, nil))
			if _, err := c.Write(b); err != nil {
				return
			}
		}
	}
}

// instanceAgent answers Info with the number of the stream that carried it.
type instanceAgent struct {
	execwire.UnimplementedAgent
	n int32
}

func (a instanceAgent) Info(context.Context, *agentv1.InfoRequest) (*agentv1.InfoResponse, error) {
	return &agentv1.InfoResponse{AgentInstance: uint64(a.n)}, nil
}

func byStream(f func(n int32) execwire.Agent) func(int32, net.Conn) {
	return func(n int32, c net.Conn) { serveCalls(f(n))(n, c) }
}

func infoFrom(t *testing.T, c *Client, ctx context.Context) int32 {
	t.Helper()
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatalf("info: %v", err)
	}
	return int32(info.GetAgentInstance())
}

// Calls go one after another on one stream, kept until Close.
func TestCallsShareAStream(t *testing.T) {
	g := &streams{serve: byStream(func(n int32) execwire.Agent { return instanceAgent{n: n} })}
	c, _ := New(g.dial)
	for i := range 5 {
		if n := infoFrom(t, c, t.Context()); n != 1 {
			t.Fatalf("call %d went on stream %d", i, n)
		}
	}
	if err := c.SetTime(t.Context(), time.Now()); agentv1.CodeOf(err) != agentv1.Code_UNIMPLEMENTED {
		t.Fatalf("set time: %v", err)
	}
	if g.dials.Load() != 1 {
		t.Fatalf("%d dials for 6 calls", g.dials.Load())
	}
	// Concurrent calls take turns on it.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if _, err := c.Info(t.Context()); err != nil {
				t.Errorf("concurrent info: %v", err)
			}
		})
	}
	wg.Wait()
	if g.dials.Load() != 1 {
		t.Fatalf("%d dials after concurrent calls", g.dials.Load())
	}
	c.Close()
	eventually(t, "the kept stream ends at Close", func() bool { return g.open.Load() == 0 })
}

// slowAgent answers the first stream's first call late (after the
// caller gave up) and every other call at once.
type slowAgent struct {
	instanceAgent
	release chan struct{}
}

func (a slowAgent) Info(ctx context.Context, r *agentv1.InfoRequest) (*agentv1.InfoResponse, error) {
	if a.n == 1 {
		<-a.release
	}
	return a.instanceAgent.Info(ctx, r)
}

// A call that timed out leaves no answer behind for the next one: its
// stream is closed, and the next call has a new one.
func TestCallTimeoutRedials(t *testing.T) {
	release := make(chan struct{})
	g := &streams{serve: byStream(func(n int32) execwire.Agent {
		return slowAgent{instanceAgent{n: n}, release}
	})}
	c, _ := New(g.dial)
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	_, err := c.Info(ctx)
	cancel()
	if agentv1.CodeOf(err) != agentv1.Code_DEADLINE_EXCEEDED {
		t.Fatalf("mute call: %v", err)
	}
	close(release) // the late answer goes nowhere
	if n := infoFrom(t, c, t.Context()); n != 2 {
		t.Fatalf("the call after a timeout went on stream %d", n)
	}
	// A caller whose context ends while another call holds the stream
	// gives up without touching it.
	g2 := &streams{serve: byStream(func(n int32) execwire.Agent { return slowAgent{instanceAgent{n: n}, make(chan struct{})} })}
	c2, _ := New(g2.dial)
	defer c2.Close()
	hold, cancelHold := context.WithCancel(t.Context())
	held := make(chan error, 1)
	go func() { _, err := c2.Info(hold); held <- err }()
	eventually(t, "first call dialled", func() bool { return g2.dials.Load() == 1 })
	ctx, cancel = context.WithTimeout(t.Context(), 20*time.Millisecond)
	_, err = c2.Info(ctx)
	cancel()
	if agentv1.CodeOf(err) != agentv1.Code_DEADLINE_EXCEEDED || g2.dials.Load() != 1 {
		t.Fatalf("waiting call: %v after %d dials", err, g2.dials.Load())
	}
	cancelHold()
	if err := <-held; agentv1.CodeOf(err) != agentv1.Code_CANCELED {
		t.Fatalf("held call: %v", err)
	}
}

// strayGuest answers the first call on stream 1 with instance 1 followed,
// in the same write, by stray (given that answer's frame); everything else
// as instanceAgent does.
func strayGuest(stray func(answer []byte) []byte) *streams {
	g := &streams{}
	g.serve = func(n int32, c net.Conn) {
		serve := serveCalls(instanceAgent{n: n})
		if n == 1 {
			r := execwire.NewReader(c)
			_, m, err := r.Next()
			if err != nil || r.Message(m, new(agentv1.AgentRequest)) != nil {
				return
			}
			b, _ := execwire.AppendMessage(nil, execwire.KindEvent, &agentv1.AgentResponse{Result: &agentv1.AgentResponse_Info{Info: &agentv1.InfoResponse{AgentInstance: 1}}})
			c.Write(append(b, stray(b)...))
		}
		serve(n, c)
	}
	return g
}

// A guest that answers when no call waits breaks the protocol: the stream
// ends, and the next call has a new one.
func TestStrayAnswerEndsStream(t *testing.T) {
	g := strayGuest(func(answer []byte) []byte { return answer }) // the first call answered twice
	c, _ := New(g.dial)
	defer c.Close()
	if n := infoFrom(t, c, t.Context()); n != 1 {
		t.Fatalf("first call: stream %d", n)
	}
	eventually(t, "the stray answer ends the stream", func() bool { return g.open.Load() == 0 })
	if n := infoFrom(t, c, t.Context()); n != 2 {
		t.Fatalf("the call after a stray answer went on stream %d", n)
	}
}

// A stray answer that comes with the answer (one write) is never taken
// for the next call's, however soon that call follows: the next call goes
// on a new stream and gets its own answer (the robust suite's hostile
// agent does this; once, the host took the stray for the answer to the
// call right after, when that call was sent before the reader had read on).
func TestStrayWithAnswerNotTaken(t *testing.T) {
	stray, _ := execwire.AppendMessage(nil, execwire.KindEvent, &agentv1.AgentResponse{Result: &agentv1.AgentResponse_Error{Error: &agentv1.Error{Code: 9, Message: "stray"}}})
	for range 50 {
		g := strayGuest(func([]byte) []byte { return stray })
		c, _ := New(g.dial)
		if n := infoFrom(t, c, t.Context()); n != 1 {
			t.Fatalf("first call: stream %d", n)
		}
		if n := infoFrom(t, c, t.Context()); n != 2 {
			t.Fatalf("the call right after a stray answer went on stream %d", n)
		}
		c.Close()
	}
}

// A kept stream that breaks just as a call uses it (the agent restarted:
// the old agent's stream fails) is replaced, and the call answered.
func TestKeptStreamBrokenRetries(t *testing.T) {
	ended := make(chan struct{})
	g := &streams{}
	g.serve = func(n int32, c net.Conn) {
		if n == 1 {
			// Answer one call, then read the next request and end.
			r := execwire.NewReader(c)
			for i := 0; ; i++ {
				_, m, err := r.Next()
				if err != nil || r.Message(m, new(agentv1.AgentRequest)) != nil {
					return
				}
				if i == 1 {
					close(ended)
					return
				}
				b, _ := execwire.AppendMessage(nil, execwire.KindEvent, &agentv1.AgentResponse{Result: &agentv1.AgentResponse_Info{Info: &agentv1.InfoResponse{AgentInstance: 1}}})
				c.Write(b)
			}
		}
		serveCalls(instanceAgent{n: n})(n, c)
	}
	c, _ := New(g.dial)
	defer c.Close()
	if n := infoFrom(t, c, t.Context()); n != 1 {
		t.Fatalf("first call: stream %d", n)
	}
	if n := infoFrom(t, c, t.Context()); n != 2 {
		t.Fatalf("the call whose stream broke: stream %d", n)
	}
	<-ended
	// A new stream that fails the same way is the agent's answer.
	g2 := &streams{serve: func(int32, net.Conn) {}}
	c2, _ := New(g2.dial)
	defer c2.Close()
	if _, err := c2.Info(t.Context()); agentv1.CodeOf(err) != agentv1.Code_UNAVAILABLE || g2.dials.Load() != 1 {
		t.Fatalf("a fresh stream that ends at once: %v after %d dials", err, g2.dials.Load())
	}
}

// execGuest runs tasks: each stream's start is answered with an exit
// whose code is the stream's number.
func execGuest(n int32, c net.Conn) {
	s := execwire.NewStream(c)
	req, err := s.Recv()
	if err != nil || req.GetStart() == nil {
		return
	}
	s.Send(&agentv1.ExecEvent{Event: &agentv1.ExecEvent_Exit{Exit: &agentv1.Exit{Code: n}}})
}

// The next task's stream is dialled while a task runs, and taken by it.
func TestExecSpareStream(t *testing.T) {
	g := &streams{serve: execGuest}
	c, _ := New(func(ctx context.Context, port uint32) (net.Conn, error) {
		if port != api.PortExec {
			return nil, errors.New("not the exec port")
		}
		return g.dial(ctx, port)
	})
	run := func() int {
		t.Helper()
		exit, err := c.Exec(t.Context(), Spec{Argv: []string{"true"}}, Stdio{})
		if err != nil {
			t.Fatal(err)
		}
		return exit.Code
	}
	if n := run(); n != 1 {
		t.Fatalf("first task on stream %d", n)
	}
	eventually(t, "a spare is dialled", func() bool { return g.dials.Load() == 2 })
	if n := run(); n != 2 {
		t.Fatalf("second task on stream %d, not the spare", n)
	}
	eventually(t, "the next spare is dialled", func() bool { return g.dials.Load() == 3 })
	// One spare at a time, however many tasks.
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { run() })
	}
	wg.Wait()
	eventually(t, "one spare left", func() bool { return g.open.Load() == 1 })
	c.Close()
	eventually(t, "the spare ends at Close", func() bool { return g.open.Load() == 0 })
	// After Close no spare is kept.
	before := g.dials.Load()
	run()
	time.Sleep(10 * time.Millisecond)
	if g.dials.Load() != before+1 || g.open.Load() != 0 {
		t.Fatalf("after Close: %d dials for one task, %d streams open", g.dials.Load()-before, g.open.Load())
	}
}

// A spare whose agent is gone (it restarted) fails to take the start; the
// task goes on a new stream instead.
func TestExecDeadSpare(t *testing.T) {
	g := &streams{}
	g.serve = func(n int32, c net.Conn) {
		if n == 2 {
			return // the spare: its end closes at once
		}
		execGuest(n, c)
	}
	c, _ := New(g.dial)
	defer c.Close()
	if exit, err := c.Exec(t.Context(), Spec{Argv: []string{"true"}}, Stdio{}); err != nil || exit.Code != 1 {
		t.Fatalf("first task: %v %+v", err, exit)
	}
	eventually(t, "the spare is dialled and dead", func() bool { return g.dials.Load() == 2 && g.open.Load() == 0 })
	if exit, err := c.Exec(t.Context(), Spec{Argv: []string{"true"}}, Stdio{}); err != nil || exit.Code != 3 {
		t.Fatalf("task after a dead spare: %v %+v", err, exit)
	}
}
