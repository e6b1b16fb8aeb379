package session

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/app/sandbox"
	"github.com/airlock-sandbox/airlock/vm"
)

func TestStartRunsAndStopStops(t *testing.T) {
	noLeaks(t)
	f := &fakeVMs{}
	cfg := testConfig(t, f)
	s := newSession(t, cfg)
	events := s.Subscribe(ctxGuard(t), 256)
	if st := s.Status(); st.State != StateStopped || st.Generation != 0 {
		t.Fatalf("new session: %+v", st)
	}
	if _, _, err := s.Agent(ctxGuard(t)); !errors.Is(err, ErrStopped) {
		t.Fatalf("Agent on a stopped session: %v", err)
	}
	if err := s.Start(ctxGuard(t)); err != nil {
		t.Fatal(err)
	}
	st := s.Status()
	if st.State != StateRunning || st.Generation != 1 || st.Workspace != "/work/a" || st.CPUs != 3 || st.MemoryMiB != 768 ||
		st.Accelerator != "none" || st.BootTime <= 0 || st.ConsoleLog != filepath.Join(cfg.RunDir, "console.log") {
		t.Fatalf("running: %+v", st)
	}
	agent, gen, err := s.Agent(ctxGuard(t))
	if err != nil || gen != 1 {
		t.Fatalf("Agent: gen %d, %v", gen, err)
	}
	if _, err := agent.Info(ctxGuard(t)); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctxGuard(t)); err != nil || f.count() != 1 {
		t.Fatalf("a second Start: %v, %d machines", err, f.count())
	}
	m, _ := f.machine(t, 1)
	if got := m.Config().Share; got == nil || got.HostPath != "/work/a" {
		t.Fatalf("share %+v", got)
	}
	if err := s.Stop(ctxGuard(t)); err != nil {
		t.Fatal(err)
	}
	if st := s.Status(); st.State != StateStopped {
		t.Fatalf("after Stop: %+v", st)
	}
	if m.State() != vm.StateStopped {
		t.Fatalf("machine %s after Stop, want an orderly power-off", m.State())
	}
	if _, err := os.Stat(filepath.Join(cfg.RunDir, "vm-1")); !os.IsNotExist(err) {
		t.Fatalf("runtime folder of the stopped VM: %v", err)
	}

	var seen []string
	for e := range events {
		if e.Kind == EventState {
			seen = append(seen, string(e.Status.State)+"/"+e.Status.Phase)
		}
		if e.Kind == EventState && e.Status.State == StateStopped && len(seen) > 1 {
			break
		}
	}
	want := []string{"stopped/", "starting/" + PhasePreparing, "starting/" + PhaseCreatingMachine,
		"starting/" + PhaseStartingMachine, "starting/" + PhaseWaitingForGuest, "starting/" + PhaseConnectingAgent,
		"running/", "stopping/" + PhaseStoppingMachine, "stopped/"}
	if !slices.Equal(seen, want) {
		t.Fatalf("events\n got %q\nwant %q", seen, want)
	}
}

func TestBootFailureBacksOffThenFails(t *testing.T) {
	noLeaks(t)
	f := &fakeVMs{kind: func(int) guestKind { return guestDieInBoot }}
	s := newSession(t, testConfig(t, f))
	events := s.Subscribe(ctxGuard(t), 256)
	err := s.Start(ctxGuard(t))
	if !errors.Is(err, ErrFailed) || !errors.Is(err, sandbox.ErrNotReady) || !strings.Contains(err.Error(), "exit status 1") {
		t.Fatalf("Start: %v", err)
	}
	st := s.Status()
	if st.State != StateFailed || st.Failures != 4 || f.count() != 4 || !strings.Contains(st.LastError, "stopped during boot") {
		t.Fatalf("after giving up: %d machines, %+v", f.count(), st)
	}
	if _, _, err := s.Agent(ctxGuard(t)); !errors.Is(err, ErrFailed) {
		t.Fatalf("Agent on a failed session: %v", err)
	}
	retries := 0
	for e := range events {
		if e.Kind == EventState && e.Status.State == StateRestarting && e.Status.Phase == PhaseWaitingToRetry {
			retries++
		}
		if e.Kind == EventState && e.Status.State == StateFailed {
			break
		}
	}
	if retries != 3 {
		t.Fatalf("%d retries announced, want 3", retries)
	}
	// Start on a failed session tries afresh.
	if err := s.Start(ctxGuard(t)); !errors.Is(err, ErrFailed) || f.count() != 8 {
		t.Fatalf("second Start: %v, %d machines", err, f.count())
	}
	f.allFinal(t)
}

func TestBackoffDelays(t *testing.T) {
	noLeaks(t)
	clock := &fakeClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	var calls atomic.Int32
	cfg := testConfig(t, &fakeVMs{})
	cfg.Restart, cfg.Clock = RestartPolicy{}, clock // the defaults: 0.5 s doubling, 5 failures
	cfg.Start = func(context.Context, sandbox.Options) (Sandbox, error) {
		calls.Add(1)
		return nil, errors.New("no luck")
	}
	s := newSession(t, cfg)
	if err := s.Start(ctxGuard(t)); !errors.Is(err, ErrFailed) || !strings.Contains(err.Error(), "no luck") {
		t.Fatalf("Start: %v", err)
	}
	want := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second}
	if got := clock.recorded(); !slices.Equal(got, want) || calls.Load() != 5 {
		t.Fatalf("waited %v over %d boots, want %v over 5", got, calls.Load(), want)
	}
}

func TestPermanentBootErrorFailsAtOnce(t *testing.T) {
	noLeaks(t)
	cfg := testConfig(t, &fakeVMs{})
	var calls atomic.Int32
	cfg.Start = func(context.Context, sandbox.Options) (Sandbox, error) {
		calls.Add(1)
		return nil, errors.Join(vm.ErrInvalidConfig, errors.New("at least one CPU is needed"))
	}
	s := newSession(t, cfg)
	if err := s.Start(ctxGuard(t)); !errors.Is(err, ErrFailed) || !errors.Is(err, vm.ErrInvalidConfig) || calls.Load() != 1 {
		t.Fatalf("Start: %v after %d boots", err, calls.Load())
	}
}

func TestVMDiesLostAndRestarted(t *testing.T) {
	noLeaks(t)
	f := &fakeVMs{}
	cfg := testConfig(t, f)
	lost := make(chan int, 4)
	var s *Session
	cfg.OnLost = func(gen int, err error) {
		if !errors.Is(err, ErrMachineExited) {
			t.Errorf("lost because %v", err)
		}
		if st := s.Status(); st.State != StateRestarting {
			t.Errorf("OnLost while %s", st.State)
		}
		lost <- gen
	}
	s = newSession(t, cfg)
	events := s.Subscribe(ctxGuard(t), 256)
	if err := s.Start(ctxGuard(t)); err != nil {
		t.Fatal(err)
	}
	m1, a1 := f.machine(t, 1)
	a1.kill()
	if gen := <-lost; gen != 1 {
		t.Fatalf("lost generation %d", gen)
	}
	_, gen, err := s.Agent(ctxGuard(t))
	if err != nil || gen != 2 {
		t.Fatalf("Agent after the loss: gen %d, %v", gen, err)
	}
	st := s.Status()
	if st.Restarts != 1 || !strings.Contains(st.LastError, "exited unexpectedly") || !m1.State().Final() {
		t.Fatalf("after the restart: %+v, old machine %s", st, m1.State())
	}
	for e := range events {
		if e.Kind == EventLost {
			if e.Generation != 1 || !strings.Contains(e.Error, "signal: killed") {
				t.Fatalf("lost event %+v", e)
			}
			break
		}
	}
}

func TestAgentHangDetected(t *testing.T) {
	noLeaks(t)
	f := &fakeVMs{}
	cfg := testConfig(t, f)
	lost := make(chan error, 4)
	cfg.OnLost = func(gen int, err error) { lost <- err }
	s := newSession(t, cfg)
	if err := s.Start(ctxGuard(t)); err != nil {
		t.Fatal(err)
	}
	m1, a1 := f.machine(t, 1)
	waitFor(t, s, "health checks", func(Status) bool { return a1.infos.Load() > 0 })
	a1.hang.Store(true)
	if err := <-lost; !errors.Is(err, ErrAgentUnresponsive) {
		t.Fatalf("lost because %v", err)
	}
	if _, gen, err := s.Agent(ctxGuard(t)); err != nil || gen != 2 {
		t.Fatalf("Agent after the hang: gen %d, %v", gen, err)
	}
	if !m1.State().Final() {
		t.Fatalf("hung machine left %s", m1.State())
	}
}

func TestQuickLossesGiveUp(t *testing.T) {
	noLeaks(t)
	f := &fakeVMs{kind: func(int) guestKind { return guestDieAtOnce }}
	cfg := testConfig(t, f)
	var losses atomic.Int32
	cfg.OnLost = func(int, error) { losses.Add(1) }
	s := newSession(t, cfg)
	s.Start(ctxGuard(t)) // may see the first VM running, or already failed
	st := waitFor(t, s, "failed", func(st Status) bool { return st.State == StateFailed })
	if st.Generation != 4 || losses.Load() != 4 || !strings.Contains(st.LastError, "exited unexpectedly") {
		t.Fatalf("after quick losses: %d lost, %+v", losses.Load(), st)
	}
	f.allFinal(t)
}

func TestSetWorkspace(t *testing.T) {
	noLeaks(t)
	f := &fakeVMs{}
	s := newSession(t, testConfig(t, f))
	// While stopped, the folder is only recorded.
	if err := s.SetWorkspace(ctxGuard(t), "/work/b", false); err != nil || f.count() != 0 {
		t.Fatalf("SetWorkspace while stopped: %v, %d machines", err, f.count())
	}
	if err := s.Start(ctxGuard(t)); err != nil {
		t.Fatal(err)
	}
	m1, _ := f.machine(t, 1)
	if sh := m1.Config().Share; sh.HostPath != "/work/b" || sh.ReadOnly {
		t.Fatalf("first share %+v", sh)
	}
	if err := s.SetWorkspace(ctxGuard(t), "/work/c", true); err != nil {
		t.Fatal(err)
	}
	st := s.Status()
	m2, _ := f.machine(t, 2)
	if sh := m2.Config().Share; st.Generation != 2 || st.Workspace != "/work/c" || !st.ReadOnly || sh.HostPath != "/work/c" || !sh.ReadOnly {
		t.Fatalf("after the change: %+v, share %+v", st, sh)
	}
	if m1.State() != vm.StateStopped {
		t.Fatalf("old machine %s, want an orderly stop", m1.State())
	}
	// A folder that may not be shared leaves the running VM alone.
	err := s.SetWorkspace(ctxGuard(t), "/home/bad", false)
	if err == nil || !strings.Contains(err.Error(), "home folder") {
		t.Fatalf("bad folder: %v", err)
	}
	if st := s.Status(); st.State != StateRunning || st.Generation != 2 || st.Workspace != "/work/c" || f.count() != 2 {
		t.Fatalf("after a refused folder: %+v, %d machines", st, f.count())
	}
	// No folder at all.
	if err := s.SetWorkspace(ctxGuard(t), "", false); err != nil {
		t.Fatal(err)
	}
	if m3, _ := f.machine(t, 3); m3.Config().Share != nil {
		t.Fatalf("share %+v, want none", m3.Config().Share)
	}
}

func TestStopDuringBoot(t *testing.T) {
	noLeaks(t)
	f := &fakeVMs{kind: func(int) guestKind { return guestNeverReady }}
	s := newSession(t, testConfig(t, f))
	started := make(chan error, 1)
	go func() { started <- s.Start(ctxGuard(t)) }()
	waitFor(t, s, "the guest boot", func(st Status) bool { return st.Phase == PhaseWaitingForGuest })
	if err := s.Stop(ctxGuard(t)); err != nil {
		t.Fatal(err)
	}
	if err := <-started; !errors.Is(err, ErrStopped) {
		t.Fatalf("Start interrupted by Stop: %v", err)
	}
	if st := s.Status(); st.State != StateStopped || st.Generation != 0 {
		t.Fatalf("after Stop: %+v", st)
	}
	f.allFinal(t)
}

func TestSetWorkspaceRevivesAFailedSession(t *testing.T) {
	noLeaks(t)
	var broken atomic.Bool
	broken.Store(true)
	f := &fakeVMs{kind: func(int) guestKind {
		if broken.Load() {
			return guestDieInBoot
		}
		return guestGood
	}}
	s := newSession(t, testConfig(t, f))
	if err := s.Start(ctxGuard(t)); !errors.Is(err, ErrFailed) {
		t.Fatalf("Start: %v", err)
	}
	broken.Store(false)
	if err := s.SetWorkspace(ctxGuard(t), "/work/fixed", false); err != nil {
		t.Fatal(err)
	}
	if st := s.Status(); st.State != StateRunning || st.Generation != 1 || st.Failures != 0 {
		t.Fatalf("after the change: %+v", st)
	}
}

func TestRestart(t *testing.T) {
	noLeaks(t)
	f := &fakeVMs{}
	s := newSession(t, testConfig(t, f))
	if err := s.Restart(ctxGuard(t)); err != nil { // from stopped: a start
		t.Fatal(err)
	}
	if err := s.Restart(ctxGuard(t)); err != nil {
		t.Fatal(err)
	}
	m1, _ := f.machine(t, 1)
	if st := s.Status(); st.State != StateRunning || st.Generation != 2 || st.Restarts != 0 || m1.State() != vm.StateStopped {
		t.Fatalf("after Restart: %+v, old machine %s", st, m1.State())
	}
}

func TestAgentCutsBackoffShort(t *testing.T) {
	noLeaks(t)
	f := &fakeVMs{kind: func(n int) guestKind { return map[bool]guestKind{true: guestDieInBoot}[n == 1] }}
	cfg := testConfig(t, f)
	cfg.Restart.InitialDelay, cfg.Restart.MaxDelay = time.Hour, time.Hour
	s := newSession(t, cfg)
	go s.Start(ctxGuard(t))
	waitFor(t, s, "the back-off", func(st Status) bool { return st.State == StateRestarting && st.RetryIn > 0 })
	if _, gen, err := s.Agent(ctxGuard(t)); err != nil || gen != 1 {
		t.Fatalf("Agent during a back-off: gen %d, %v", gen, err)
	}
}

func TestCloseLeavesNothing(t *testing.T) {
	noLeaks(t)
	f := &fakeVMs{}
	cfg := testConfig(t, f)
	cfg.RunDir = "" // the session makes and removes its own
	s := New(cfg)
	events := s.Subscribe(context.Background(), 0)
	if err := s.Start(ctxGuard(t)); err != nil {
		t.Fatal(err)
	}
	runDir := filepath.Dir(s.Status().ConsoleLog)
	if err := s.Close(ctxGuard(t)); err != nil {
		t.Fatal(err)
	}
	for range events { // the subscription ends
	}
	f.allFinal(t)
	if _, err := os.Stat(runDir); !os.IsNotExist(err) {
		t.Fatalf("runtime folder %s: %v", runDir, err)
	}
	for name, err := range map[string]error{
		"Start": s.Start(ctxGuard(t)), "Stop": s.Stop(ctxGuard(t)), "Restart": s.Restart(ctxGuard(t)),
		"SetWorkspace": s.SetWorkspace(ctxGuard(t), "/work/x", false),
	} {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: %v", name, err)
		}
	}
	if _, _, err := s.Agent(ctxGuard(t)); !errors.Is(err, ErrClosed) {
		t.Errorf("Agent after Close: %v", err)
	}
	if err := s.Close(ctxGuard(t)); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, ok := <-s.Subscribe(context.Background(), 0); ok {
		t.Error("Subscribe after Close delivered an event")
	}
}

func TestSlowSubscriberNeverBlocks(t *testing.T) {
	noLeaks(t)
	f := &fakeVMs{}
	s := newSession(t, testConfig(t, f))
	events := s.Subscribe(ctxGuard(t), 2) // never read until the end
	for range 3 {
		if err := s.Restart(ctxGuard(t)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Stop(ctxGuard(t)); err != nil {
		t.Fatal(err)
	}
	<-events                     // the initial status
	<-events                     // an early event
	s.update(func(*snapshot) {}) // room now: a lag marker, then this
	if e := <-events; e.Kind != EventLag || e.Dropped < 10 {
		t.Fatalf("after falling behind: %+v", e)
	}
	if e := <-events; e.Kind != EventState || e.Status.State != StateStopped {
		t.Fatalf("after the lag marker: %+v", e)
	}
}

func TestConcurrentUse(t *testing.T) {
	// The agent client holds no goroutine between calls (each call is a
	// stream of its own), so a boot cancelled while it sets the guest clock
	// leaves none behind either.
	noLeaks(t)
	f := &fakeVMs{}
	s := newSession(t, testConfig(t, f))
	ctx := ctxGuard(t)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 5 {
				switch (i + j) % 5 {
				case 0:
					s.Start(ctx)
				case 1:
					s.Stop(ctx)
				case 2:
					s.Restart(ctx)
				case 3:
					s.SetWorkspace(ctx, "/work/z", j%2 == 0)
				case 4:
					if c, _, err := s.Agent(ctx); err == nil {
						c.Info(ctx) // may fail: the VM may be going away
					}
				}
				_ = s.Status()
			}
		})
	}
	wg.Wait()
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	f.allFinal(t)
}

// TestAgentRestartReconnects checks that an agent restarted inside the VM
// is reached again on the same VM, with an event and a count, and that a
// guest that keeps restarting its agent costs the VM after Reconnects.
func TestAgentRestartReconnects(t *testing.T) {
	noLeaks(t)
	f := &fakeVMs{}
	cfg := testConfig(t, f)
	cfg.Health.Reconnects = 2
	lost := make(chan error, 4)
	cfg.OnLost = func(gen int, err error) { lost <- err }
	s := newSession(t, cfg)
	events := s.Subscribe(ctxGuard(t), 256)
	if err := s.Start(ctxGuard(t)); err != nil {
		t.Fatal(err)
	}
	_, a1 := f.machine(t, 1)
	for i := 1; i <= 2; i++ {
		a1.restart <- struct{}{}
		st := waitFor(t, s, "reconnect", func(st Status) bool { return st.AgentRestarts == i })
		if st.Generation != 1 || st.State != StateRunning || st.Restarts != 0 {
			t.Fatalf("after agent restart %d: %+v", i, st)
		}
		for e := range events {
			if e.Kind == EventReconnected {
				if e.Generation != 1 || !strings.Contains(e.Error, "restarted") {
					t.Fatalf("event %+v", e)
				}
				break
			}
		}
		if _, gen, err := s.Agent(ctxGuard(t)); err != nil || gen != 1 {
			t.Fatalf("Agent after restart %d: gen %d, %v", i, gen, err)
		}
	}
	select {
	case err := <-lost:
		t.Fatalf("lost after allowed restarts: %v", err)
	default:
	}
	a1.restart <- struct{}{}
	if err := <-lost; !errors.Is(err, ErrAgentRestarting) {
		t.Fatalf("lost because %v", err)
	}
	st := waitFor(t, s, "the next VM", func(st Status) bool { return st.State == StateRunning && st.Generation == 2 })
	if st.AgentRestarts != 0 {
		t.Fatalf("new VM inherits agent restarts: %+v", st)
	}
}

func TestCheckAgentTakesUpARestartAtOnce(t *testing.T) {
	noLeaks(t)
	f := &fakeVMs{}
	cfg := testConfig(t, f)
	cfg.Health.Interval = time.Hour             // only CheckAgent checks
	cfg.Health.Timeout = 250 * time.Millisecond // an answer under a loaded CI host still fits
	lost := make(chan error, 4)
	cfg.OnLost = func(gen int, err error) { lost <- err }
	s := newSession(t, cfg)
	if err := s.Start(ctxGuard(t)); err != nil {
		t.Fatal(err)
	}
	_, a1 := f.machine(t, 1)

	// A check that fails (the new agent not yet listening) is retried, and
	// counts no miss however often it fails.
	a1.hang.Store(true)
	s.CheckAgent()
	time.Sleep(20 * (pokeRetry + cfg.Health.Timeout) / 10)
	if st := s.Status(); st.State != StateRunning || st.AgentRestarts != 0 {
		t.Fatalf("after failed poked checks: %+v", st)
	}
	a1.restart <- struct{}{}
	a1.hang.Store(false)
	st := waitFor(t, s, "the restart taken up by the poke's retries", func(st Status) bool { return st.AgentRestarts == 1 })
	if st.Generation != 1 {
		t.Fatalf("after the restart: %+v", st)
	}

	// Once answered, a poke checks once.
	a1.restart <- struct{}{}
	for a1.instance.Load() != 3 { // the old agent is gone
		time.Sleep(time.Millisecond)
	}
	s.CheckAgent()
	waitFor(t, s, "the second restart", func(st Status) bool { return st.AgentRestarts == 2 })
	n := a1.infos.Load()
	time.Sleep(5 * pokeRetry)
	if got := a1.infos.Load(); got != n {
		t.Fatalf("%d more checks after the poke was answered", got-n)
	}
	select {
	case err := <-lost:
		t.Fatalf("lost: %v", err)
	default:
	}
}

// SetSize leaves a running VM alone and sizes the next one booted; while
// none runs, Status shows the new size at once.
func TestSetSizeAppliesOnNextStart(t *testing.T) {
	noLeaks(t)
	f := &fakeVMs{}
	s := newSession(t, testConfig(t, f))
	if err := s.Start(ctxGuard(t)); err != nil {
		t.Fatal(err)
	}
	before := s.Status()
	if err := s.SetSize(ctxGuard(t), 3, 768); err != nil {
		t.Fatal(err)
	}
	if st := s.Status(); st.State != StateRunning || st.Generation != 1 || st.CPUs != before.CPUs || st.MemoryMiB != before.MemoryMiB || f.count() != 1 {
		t.Fatalf("SetSize touched the running VM: %+v, %d machines", st, f.count())
	}
	if err := s.Restart(ctxGuard(t)); err != nil {
		t.Fatal(err)
	}
	m2, _ := f.machine(t, 2)
	if c := m2.Config(); c.CPUs != 3 || c.MemoryMiB != 768 {
		t.Fatalf("the next VM has %d CPUs, %d MiB; want 3, 768", c.CPUs, c.MemoryMiB)
	}
	if st := s.Status(); st.CPUs != 3 || st.MemoryMiB != 768 {
		t.Fatalf("status after the restart: %d CPUs, %d MiB", st.CPUs, st.MemoryMiB)
	}
	if err := s.Stop(ctxGuard(t)); err != nil {
		t.Fatal(err)
	}
	if err := s.SetSize(ctxGuard(t), 1, 512); err != nil {
		t.Fatal(err)
	}
	if st := s.Status(); st.CPUs != 1 || st.MemoryMiB != 512 {
		t.Fatalf("status while stopped: %d CPUs, %d MiB; want the new size", st.CPUs, st.MemoryMiB)
	}
}
