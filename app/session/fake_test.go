package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/app/sandbox"
	"github.com/airlock-sandbox/airlock/guest/api"
	agentv1 "github.com/airlock-sandbox/airlock/guest/api/agent/v1"
	"github.com/airlock-sandbox/airlock/guest/api/execwire"
	"github.com/airlock-sandbox/airlock/vm"
	"github.com/airlock-sandbox/airlock/vm/vmtest"
)

// fakeAgent plays the guest agent of one fake VM.
type fakeAgent struct {
	off       chan struct{} // closed by Shutdown: orderly power-off
	offOnce   sync.Once
	die       chan struct{} // closed by the test: the VM crashes
	dieOnce   sync.Once
	hang      atomic.Bool // Info never answers
	dieOnInfo bool        // the VM crashes at the first health check
	infos     atomic.Int64
	restart   chan struct{} // a send restarts the agent inside the VM
	instance  atomic.Uint64 // Info.agent_instance: a new one per restart
}

func newFakeAgent() *fakeAgent {
	a := &fakeAgent{off: make(chan struct{}), die: make(chan struct{}), restart: make(chan struct{})}
	a.instance.Store(1)
	return a
}

func (a *fakeAgent) Info(ctx context.Context, _ *agentv1.InfoRequest) (*agentv1.InfoResponse, error) {
	if a.hang.Load() {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	a.infos.Add(1)
	if a.dieOnInfo {
		a.kill()
	}
	return &agentv1.InfoResponse{AgentVersion: "fake", AgentInstance: a.instance.Load()}, nil
}

func (a *fakeAgent) SetTime(context.Context, *agentv1.SetTimeRequest) (*agentv1.SetTimeResponse, error) {
	return &agentv1.SetTimeResponse{}, nil
}

func (a *fakeAgent) TrustCA(context.Context, *agentv1.TrustCARequest) (*agentv1.TrustCAResponse, error) {
	return &agentv1.TrustCAResponse{}, nil
}

func (a *fakeAgent) Shutdown(context.Context, *agentv1.ShutdownRequest) (*agentv1.ShutdownResponse, error) {
	a.offOnce.Do(func() { close(a.off) })
	return &agentv1.ShutdownResponse{}, nil
}

// kill makes the VM exit as if its hypervisor process died.
func (a *fakeAgent) kill() { a.dieOnce.Do(func() { close(a.die) }) }

// guestKind says how a fake VM behaves.
type guestKind int

const (
	guestGood       guestKind = iota // boots, serves the agent, powers off on request
	guestDieInBoot                   // exits before it is ready
	guestNeverReady                  // boots but never signals readiness
	guestDieAtOnce                   // runs, and exits at the first health check
)

// fakeVMs makes the fake machines of a session and remembers them.
type fakeVMs struct {
	mu       sync.Mutex
	kind     func(n int) guestKind // behaviour of the n-th machine (from 1)
	machines []*vmtest.Machine
	agents   []*fakeAgent
}

func (f *fakeVMs) newMachine(cfg vm.Config) (vm.Machine, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(f.machines) + 1
	kind := guestGood
	if f.kind != nil {
		kind = f.kind(n)
	}
	a := newFakeAgent()
	a.dieOnInfo = kind == guestDieAtOnce
	m := vmtest.New(cfg, func(ctx context.Context, g *vmtest.Guest) error { return runGuest(ctx, g, a, kind) })
	f.machines = append(f.machines, m)
	f.agents = append(f.agents, a)
	return m, nil
}

// machine returns the n-th machine and its agent (from 1).
func (f *fakeVMs) machine(t *testing.T, n int) (*vmtest.Machine, *fakeAgent) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if n > len(f.machines) {
		t.Fatalf("machine %d asked for, %d made", n, len(f.machines))
	}
	return f.machines[n-1], f.agents[n-1]
}

func (f *fakeVMs) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.machines)
}

// allFinal reports whether every machine made has stopped.
func (f *fakeVMs) allFinal(t *testing.T) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, m := range f.machines {
		if !m.State().Final() {
			t.Errorf("machine %d left %s", i+1, m.State())
		}
	}
}

func runGuest(ctx context.Context, g *vmtest.Guest, a *fakeAgent, kind guestKind) error {
	if kind == guestDieInBoot {
		return errors.New("exit status 1")
	}
	serve := func() (net.Listener, error) {
		l, err := g.Listen(api.PortAgent)
		if err != nil {
			return nil, err
		}
		go execwire.ServeAgent(l, a, nil)
		return l, nil
	}
	l, err := serve()
	if err != nil {
		return err
	}
	defer func() { l.Close() }()
	if kind != guestNeverReady {
		c, err := g.Dial(ctx, api.PortReady)
		if err != nil {
			return err
		}
		api.WriteReady(c, api.Ready{AgentVersion: "fake", AgentInstance: a.instance.Load()})
		c.Close()
	}
	for {
		select {
		case <-a.off:
			return nil
		case <-a.die:
			return errors.New("signal: killed")
		case <-ctx.Done():
			return errors.New("forced off")
		case <-a.restart:
			// The agent dies and a new one listens on the same VM.
			l.Close()
			a.instance.Add(1)
			if l, err = serve(); err != nil {
				return err
			}
		}
	}
}

// testConfig is a session config over fake VMs with short timings.
func testConfig(t *testing.T, f *fakeVMs) Config {
	return Config{
		Sandbox: sandbox.Options{
			Image: sandbox.Image{Kernel: "k", Initrd: "i"}, NewMachine: f.newMachine,
			BootTimeout: 10 * time.Second, Workspace: "/work/a", CPUs: 3, MemoryMiB: 768,
		},
		RunDir:  t.TempDir(),
		Restart: RestartPolicy{InitialDelay: time.Millisecond, MaxDelay: 8 * time.Millisecond, StableAfter: time.Hour, MaxFailures: 4},
		Health:  HealthPolicy{Interval: 10 * time.Millisecond, Timeout: 100 * time.Millisecond, Misses: 3},
		Resolve: func(dir string) (Folder, error) {
			if strings.Contains(dir, "bad") {
				return Folder{}, fmt.Errorf("%s is the home folder", dir)
			}
			return Folder{Path: dir, UID: 1234, GID: 5678}, nil
		},
		Logger: testLogger(t),
	}
}

func newSession(t *testing.T, cfg Config) *Session {
	t.Helper()
	s := New(cfg)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// testLogger logs to the test's output when -v is given.
func testLogger(t *testing.T) *slog.Logger {
	if !testing.Verbose() {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// guard is the generous upper bound of every wait in these tests.
const guard = 20 * time.Second

// waitFor polls the session's status until cond holds.
func waitFor(t *testing.T, s *Session, what string, cond func(Status) bool) Status {
	t.Helper()
	deadline := time.Now().Add(guard)
	for {
		st := s.Status()
		if cond(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: status %+v", what, st)
		}
		time.Sleep(time.Millisecond)
	}
}

func ctxGuard(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	t.Cleanup(cancel)
	return ctx
}

// noLeaks fails the test if goroutines started during it outlive it. Call
// it first, so its check runs after every other cleanup. Goroutines whose
// stack contains one of ignore are not counted.
func noLeaks(t *testing.T, ignore ...string) {
	before := goroutines(ignore)
	t.Cleanup(func() {
		deadline := time.Now().Add(guard)
		for {
			n := goroutines(ignore)
			if n <= before {
				return
			}
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				t.Errorf("goroutines leaked: %d before, %d after\n%s", before, n, buf[:runtime.Stack(buf, true)])
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
}

func goroutines(ignore []string) int {
	buf := make([]byte, 4<<20)
	n := 0
	for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if !slices.ContainsFunc(ignore, func(s string) bool { return strings.Contains(g, s) }) {
			n++
		}
	}
	return n
}

// fakeClock fires every timer at once and records what was asked for.
type fakeClock struct {
	mu    sync.Mutex
	now   time.Time
	waits []time.Duration
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.waits = append(c.waits, d)
	c.now = c.now.Add(d)
	ch := make(chan time.Time, 1)
	ch <- c.now
	return ch
}

func (c *fakeClock) recorded() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Duration(nil), c.waits...)
}
