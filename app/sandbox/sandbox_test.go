package sandbox

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/guest/api"
	agentv1 "github.com/airlock-sandbox/airlock/guest/api/agent/v1"
	"github.com/airlock-sandbox/airlock/guest/api/execwire"
	"github.com/airlock-sandbox/airlock/vm"
	"github.com/airlock-sandbox/airlock/vm/vmtest"
)

// fakeAgent answers SetTime and Shutdown; Shutdown powers the fake guest off.
type fakeAgent struct {
	execwire.UnimplementedAgent
	off       chan struct{}
	setTime   atomic.Int64
	shutdowns atomic.Int32
}

func (a *fakeAgent) SetTime(_ context.Context, r *agentv1.SetTimeRequest) (*agentv1.SetTimeResponse, error) {
	a.setTime.Store(r.UnixNanos)
	return &agentv1.SetTimeResponse{}, nil
}

func (a *fakeAgent) Shutdown(context.Context, *agentv1.ShutdownRequest) (*agentv1.ShutdownResponse, error) {
	if a.shutdowns.Add(1) > 1 {
		return &agentv1.ShutdownResponse{}, nil // powering off already
	}
	close(a.off)
	return &agentv1.ShutdownResponse{}, nil
}

// goodGuest serves a fake agent and signals readiness, like airlock-guest.
func goodGuest(a *fakeAgent) func(context.Context, *vmtest.Guest) error {
	return func(ctx context.Context, g *vmtest.Guest) error {
		return g.ServeAgent(ctx, a, nil, api.Ready{AgentVersion: "test", BootMillis: 5}, a.off)
	}
}

func startWith(t *testing.T, boot func(context.Context, *vmtest.Guest) error, timeout time.Duration) (*Sandbox, *vmtest.Machine, error) {
	t.Helper()
	var m *vmtest.Machine
	dir := t.TempDir()
	console := filepath.Join(dir, "console.log")
	os.WriteFile(console, []byte("booting\nKernel panic - not syncing: test\n"), 0o644)
	sb, err := Start(context.Background(), Options{
		Image: Image{Kernel: "k", Initrd: "i"}, RunDir: dir, ConsoleLog: console, BootTimeout: timeout,
		NewMachine: func(cfg vm.Config) (vm.Machine, error) { m = vmtest.New(cfg, boot); return m, nil },
	})
	return sb, m, err
}

func TestStartAndClose(t *testing.T) {
	a := &fakeAgent{off: make(chan struct{})}
	sb, m, err := startWith(t, goodGuest(a), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if sb.Ready().AgentVersion != "test" || a.setTime.Load() == 0 {
		t.Fatalf("ready %+v, clock set %d", sb.Ready(), a.setTime.Load())
	}
	// Close from several goroutines at once, and again after: one shutdown,
	// every caller its result.
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Go(func() { errs[i] = sb.Close(context.Background()) })
	}
	wg.Wait()
	for i, err := range append(errs, sb.CloseIdle(context.Background())) {
		if err != nil {
			t.Errorf("Close %d: %v", i, err)
		}
	}
	if n := a.shutdowns.Load(); n != 1 {
		t.Errorf("the agent was asked to shut down %d times, want once", n)
	}
	if s := m.State(); s != vm.StateStopped {
		t.Fatalf("after Close the machine is %s, want an orderly stop", s)
	}
}

func TestStartNeverReady(t *testing.T) {
	hang := func(ctx context.Context, g *vmtest.Guest) error { <-ctx.Done(); return ctx.Err() }
	_, m, err := startWith(t, hang, 200*time.Millisecond)
	if !errors.Is(err, ErrNotReady) || !strings.Contains(err.Error(), "within 200ms") || !strings.Contains(err.Error(), "Kernel panic") {
		t.Fatalf("err = %v", err)
	}
	if !m.State().Final() {
		t.Fatalf("machine left %s after a failed boot", m.State())
	}
}

func TestStartGuestDiesDuringBoot(t *testing.T) {
	die := func(context.Context, *vmtest.Guest) error { return errors.New("exit status 1") }
	_, _, err := startWith(t, die, time.Minute)
	if !errors.Is(err, ErrNotReady) || !strings.Contains(err.Error(), "stopped during boot") {
		t.Fatalf("err = %v", err)
	}
}

// TestStartHostileReady: garbage and oversized readiness messages are
// rejected without harm; the guest that then behaves still boots.
func TestStartHostileReady(t *testing.T) {
	a := &fakeAgent{off: make(chan struct{})}
	good := goodGuest(a)
	boot := func(ctx context.Context, g *vmtest.Guest) error {
		for _, junk := range []string{"not json", strings.Repeat("x", 1<<20)} {
			c, err := g.Dial(ctx, api.PortReady)
			if err != nil {
				return err
			}
			go func() { c.Write([]byte(junk)); c.Close() }()
		}
		return good(ctx, g)
	}
	sb, _, err := startWith(t, boot, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	sb.Close(context.Background())
}

// TestCloseForcesAStuckGuest: a guest that ignores shutdown is stopped anyway.
func TestCloseForcesAStuckGuest(t *testing.T) {
	a := &fakeAgent{off: make(chan struct{})}
	boot := func(ctx context.Context, g *vmtest.Guest) error {
		l, _ := g.Listen(api.PortAgent)
		go execwire.ServeAgent(l, stuck{a}, nil)
		defer l.Close()
		c, _ := g.Dial(ctx, api.PortReady)
		api.WriteReady(c, api.Ready{AgentVersion: "stuck"})
		c.Close()
		<-ctx.Done()
		return nil
	}
	sb, m, err := startWith(t, boot, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	sb.Close(context.Background())
	if !m.State().Final() {
		t.Fatalf("stuck guest left %s", m.State())
	}
}

type stuck struct{ *fakeAgent }

func (stuck) Shutdown(ctx context.Context, _ *agentv1.ShutdownRequest) (*agentv1.ShutdownResponse, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// brokenTransport is a machine whose transport fails (as a multiplexer does
// when the guest sends garbage) while the machine itself runs on.
type brokenTransport struct{ *vmtest.Machine }

func (b brokenTransport) Listen(port uint32) (net.Listener, error) {
	l, err := b.Machine.Listen(port)
	if err != nil || port != api.PortReady {
		return l, err
	}
	return failingListener{l}, nil
}

type failingListener struct{ net.Listener }

func (failingListener) Accept() (net.Conn, error) {
	return nil, errors.New("mux: protocol violation: bad hello magic")
}

// TestStartTransportBroken: a transport that fails before readiness ends
// the boot at once with the reason, not at the boot timeout.
func TestStartTransportBroken(t *testing.T) {
	hang := func(ctx context.Context, g *vmtest.Guest) error { <-ctx.Done(); return ctx.Err() }
	var m *vmtest.Machine
	_, err := Start(context.Background(), Options{
		Image: Image{Kernel: "k", Initrd: "i"}, RunDir: t.TempDir(), BootTimeout: time.Hour,
		NewMachine: func(cfg vm.Config) (vm.Machine, error) {
			m = vmtest.New(cfg, hang)
			return brokenTransport{m}, nil
		},
	})
	if !errors.Is(err, ErrNotReady) || !strings.Contains(err.Error(), "transport to the guest failed") || !strings.Contains(err.Error(), "bad hello magic") {
		t.Fatalf("err = %v", err)
	}
	if !m.State().Final() {
		t.Fatalf("machine left %s after a failed boot", m.State())
	}
}

// noReadyListener is a machine that cannot listen for the guest's
// readiness (vz: the framework refused the port).
type noReadyListener struct{ *vmtest.Machine }

func (n noReadyListener) Listen(port uint32) (net.Listener, error) {
	if port == api.PortReady {
		return nil, errors.New("vz: listen on port 1028: refused")
	}
	return n.Machine.Listen(port)
}

// TestStartListenFails: a machine whose Listen fails before it boots is
// stopped, not dropped: on vz the framework's VM and its state watcher
// exist from New on, and only Stop ends them.
func TestStartListenFails(t *testing.T) {
	hang := func(ctx context.Context, g *vmtest.Guest) error { <-ctx.Done(); return ctx.Err() }
	var m *vmtest.Machine
	_, err := Start(context.Background(), Options{
		Image: Image{Kernel: "k", Initrd: "i"}, RunDir: t.TempDir(), BootTimeout: time.Hour,
		NewMachine: func(cfg vm.Config) (vm.Machine, error) {
			m = vmtest.New(cfg, hang)
			return noReadyListener{m}, nil
		},
	})
	if err == nil || !strings.Contains(err.Error(), "listen for readiness") {
		t.Fatalf("err = %v", err)
	}
	if !m.State().Final() {
		t.Fatalf("machine left %s after its Listen failed", m.State())
	}
}

// TestStartStalledKernel: a guest whose kernel reports a stall on the
// console is given up at once, not at the boot timeout, and booted once
// more; the second boot's readiness is taken, and the first boot's report,
// still in the appended console, does not count against it.
func TestStartStalledKernel(t *testing.T) {
	defer func(d time.Duration) { stallPoll = d }(stallPoll)
	stallPoll = 10 * time.Millisecond
	for _, tt := range []struct {
		name     string
		stalls   int // boots that stall before one comes up
		wantErr  bool
		wantBoot int
	}{
		{"second boot comes up", 1, false, 2},
		{"both stall", 2, true, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := &fakeAgent{off: make(chan struct{})}
			var boots atomic.Int32
			var console string
			boot := func(ctx context.Context, g *vmtest.Guest) error {
				if int(boots.Add(1)) > tt.stalls {
					// Long enough for the stall watch to read the console
					// (the first boot's report is still in it) a few times.
					time.Sleep(100 * time.Millisecond)
					return goodGuest(a)(ctx, g)
				}
				f, _ := os.OpenFile(console, os.O_APPEND|os.O_WRONLY, 0)
				f.WriteString("[   85.4] rcu: INFO: rcu_sched self-detected stall on CPU\n")
				f.Close()
				<-ctx.Done()
				return ctx.Err()
			}
			dir := t.TempDir()
			console = filepath.Join(dir, "console.log")
			os.WriteFile(console, nil, 0o644)
			sb, err := Start(context.Background(), Options{
				Image: Image{Kernel: "k", Initrd: "i"}, RunDir: dir, ConsoleLog: console, BootTimeout: time.Hour,
				NewMachine: func(cfg vm.Config) (vm.Machine, error) { return vmtest.New(cfg, boot), nil },
			})
			if got := int(boots.Load()); got != tt.wantBoot {
				t.Errorf("%d boots, want %d", got, tt.wantBoot)
			}
			if tt.wantErr {
				if !errors.Is(err, ErrStalled) || !errors.Is(err, ErrNotReady) || !strings.Contains(err.Error(), "rcu: INFO") {
					t.Fatalf("err = %v, want ErrStalled quoting the console", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			sb.Close(context.Background())
		})
	}
}

// caAgent is fakeAgent with TrustCA: it keeps the certificate it was given.
type caAgent struct {
	*fakeAgent
	pem atomic.Pointer[[]byte]
}

func (a *caAgent) TrustCA(_ context.Context, r *agentv1.TrustCARequest) (*agentv1.TrustCAResponse, error) {
	a.pem.Store(&r.Pem)
	return &agentv1.TrustCAResponse{}, nil
}

// TestInstallCA: the CA reaches the agent's TrustCA; an agent without the
// call (an image built before it) gets an error that says to rebuild the
// image, not a bare "unimplemented".
func TestInstallCA(t *testing.T) {
	pem := []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
	t.Run("installed", func(t *testing.T) {
		a := &caAgent{fakeAgent: &fakeAgent{off: make(chan struct{})}}
		sb, _, err := startWith(t, func(ctx context.Context, g *vmtest.Guest) error {
			return g.ServeAgent(ctx, a, nil, api.Ready{AgentVersion: "test"}, a.off)
		}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Close(context.Background())
		if err := sb.installCA(context.Background(), pem); err != nil {
			t.Fatal(err)
		}
		if got := a.pem.Load(); got == nil || string(*got) != string(pem) {
			t.Errorf("the agent got %v", got)
		}
	})
	t.Run("older agent", func(t *testing.T) {
		a := &fakeAgent{off: make(chan struct{})}
		sb, _, err := startWith(t, goodGuest(a), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		defer sb.Close(context.Background())
		err = sb.installCA(context.Background(), pem)
		if err == nil || !strings.Contains(err.Error(), "rebuild the image (make image)") {
			t.Errorf("installCA with an agent that lacks TrustCA: %v", err)
		}
	})
}

// ownSystem is a fake machine that says its guest is a system of its own,
// as a real backend's is.
type ownSystem struct{ *vmtest.Machine }

func (ownSystem) GuestIsHost() bool { return false }

// TestStartGuestIsHost: Start installs the CA and runs the warm-up task
// in a guest of its own, and leaves a guest that is this host
// (vm.HostGuest) alone.
func TestStartGuestIsHost(t *testing.T) {
	pem := []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
	for _, tt := range []struct {
		name   string
		isHost bool
	}{
		{"guest is the host", true},
		{"guest of its own", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := &caAgent{fakeAgent: &fakeAgent{off: make(chan struct{})}}
			var tasks atomic.Int32
			exec := func(s *execwire.Stream) error {
				tasks.Add(1)
				if _, err := s.Recv(); err != nil {
					return err
				}
				if err := s.Send(&agentv1.ExecEvent{Event: &agentv1.ExecEvent_Started{Started: &agentv1.Started{Pid: 2}}}); err != nil {
					return err
				}
				return s.Send(&agentv1.ExecEvent{Event: &agentv1.ExecEvent_Exit{Exit: &agentv1.Exit{}}})
			}
			boot := func(ctx context.Context, g *vmtest.Guest) error {
				return g.ServeAgent(ctx, a, exec, api.Ready{AgentVersion: "test"}, a.off)
			}
			sb, err := Start(context.Background(), Options{
				Image: Image{Kernel: "k", Initrd: "i"}, RunDir: t.TempDir(), BootTimeout: time.Minute,
				GuestCA: pem, WarmUp: true,
				NewMachine: func(cfg vm.Config) (vm.Machine, error) {
					if tt.isHost {
						return vmtest.New(cfg, boot), nil
					}
					return ownSystem{vmtest.New(cfg, boot)}, nil
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			defer sb.Close(context.Background())
			if got := a.pem.Load() != nil; got == tt.isHost {
				t.Errorf("CA installed: %v", got)
			}
			if got := tasks.Load() > 0; got == tt.isHost {
				t.Errorf("warm-up task run: %v", got)
			}
		})
	}
}

// TestStartKernelNeverReachesInit: a first boot whose kernel has not
// started init (no api.InitRunning line on the console) by the deadline
// counts as stalled and is booted once more; the second boot gets the
// whole boot timeout, and a boot that printed the line is left alone.
func TestStartKernelNeverReachesInit(t *testing.T) {
	defer func(d, p time.Duration) { initDeadline, stallPoll = d, p }(initDeadline, stallPoll)
	initDeadline, stallPoll = 150*time.Millisecond, 10*time.Millisecond
	for _, tt := range []struct {
		name     string
		hangs    int    // first boots that hang before init
		initLine string // the line of a slow boot that has started init
		wantErr  bool
		wantBoot int
	}{
		{"second boot comes up", 1, "", false, 2},
		// The second boot is slower than the deadline yet not given up on.
		{"slow second boot", 1, "", false, 2},
		{"slow boot past init", 0, api.InitRunning, false, 1},
		// A machine started from a template: its boot printed
		// InitRunning on another machine's console.
		{"slow start from a template", 0, api.Woken, false, 1},
		{"both hang", 2, "", true, 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := &fakeAgent{off: make(chan struct{})}
			var boots atomic.Int32
			var console string
			boot := func(ctx context.Context, g *vmtest.Guest) error {
				n := int(boots.Add(1))
				if n <= tt.hangs {
					<-ctx.Done()
					return ctx.Err()
				}
				if tt.initLine != "" {
					f, _ := os.OpenFile(console, os.O_APPEND|os.O_WRONLY, 0)
					f.WriteString(tt.initLine + "\n")
					f.Close()
				}
				if tt.initLine != "" || tt.name == "slow second boot" {
					time.Sleep(4 * initDeadline)
				}
				return goodGuest(a)(ctx, g)
			}
			dir := t.TempDir()
			console = filepath.Join(dir, "console.log")
			os.WriteFile(console, nil, 0o644)
			timeout := time.Hour
			if tt.wantErr {
				timeout = 10 * initDeadline // the second boot's wait ends here
			}
			sb, err := Start(context.Background(), Options{
				Image: Image{Kernel: "k", Initrd: "i"}, RunDir: dir, ConsoleLog: console, BootTimeout: timeout,
				NewMachine: func(cfg vm.Config) (vm.Machine, error) { return vmtest.New(cfg, boot), nil },
			})
			if got := int(boots.Load()); got != tt.wantBoot {
				t.Errorf("%d boots, want %d", got, tt.wantBoot)
			}
			if tt.wantErr {
				// The second boot timed out: not a stall, a plain NotReady.
				if err == nil || errors.Is(err, ErrStalled) || !errors.Is(err, ErrNotReady) {
					t.Fatalf("err = %v, want the second boot's timeout", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			sb.Close(context.Background())
		})
	}
}

// TestStartSavedStateFails: a machine started from a saved state that
// fails (vm.Restorer: the backend discarded that state) is started once
// more, and only once.
func TestStartSavedStateFails(t *testing.T) {
	for _, tt := range []struct {
		name     string
		fails    int
		wantBoot int
		wantErr  bool
	}{
		{"second start boots", 1, 2, false},
		{"both fail", 2, 2, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := &fakeAgent{off: make(chan struct{})}
			var boots atomic.Int32
			boot := func(ctx context.Context, g *vmtest.Guest) error {
				if int(boots.Add(1)) <= tt.fails {
					return g.FailRestore(errors.New("qemu: the guest started from a template did not answer"))
				}
				return goodGuest(a)(ctx, g)
			}
			sb, err := Start(context.Background(), Options{
				Image: Image{Kernel: "k", Initrd: "i"}, RunDir: t.TempDir(), BootTimeout: time.Minute,
				NewMachine: func(cfg vm.Config) (vm.Machine, error) { return vmtest.New(cfg, boot), nil },
			})
			if got := int(boots.Load()); got != tt.wantBoot {
				t.Errorf("%d starts, want %d", got, tt.wantBoot)
			}
			if tt.wantErr {
				if !errors.As(err, new(restoreFailed)) || !errors.Is(err, ErrNotReady) || !strings.Contains(err.Error(), "did not answer") {
					t.Fatalf("err = %v, want the saved state's failure", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			sb.Close(context.Background())
		})
	}
}

// slowOffAgent answers Shutdown at once and powers its guest off a while
// later, as a guest's power-off does under emulation.
type slowOffAgent struct {
	fakeAgent
	delay time.Duration
}

func (a *slowOffAgent) Shutdown(context.Context, *agentv1.ShutdownRequest) (*agentv1.ShutdownResponse, error) {
	time.AfterFunc(a.delay, func() { close(a.off) })
	return &agentv1.ShutdownResponse{}, nil
}

// TestCloseIdle: Close waits for the guest's own power-off once the agent
// answered the shutdown; CloseIdle stops the machine right after the
// answer (the agent syncs before it answers), so the guest never gets to
// power itself off.
func TestCloseIdle(t *testing.T) {
	for _, tt := range []struct {
		name       string
		idle, disk bool
		wantPowOff bool
	}{
		{"Close waits for the power-off", false, false, true},
		{"CloseIdle stops after the answer", true, false, false},
		// Its file system is unmounted cleanly.
		{"CloseIdle with a persistent disk waits", true, true, true},
		{"CloseIdle with a changes layer waits", true, true, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := &slowOffAgent{fakeAgent: fakeAgent{off: make(chan struct{})}, delay: time.Second}
			ended := make(chan error, 1)
			boot := func(ctx context.Context, g *vmtest.Guest) error {
				err := g.ServeAgent(ctx, a, nil, api.Ready{AgentVersion: "test", BootMillis: 5}, a.off)
				ended <- err
				return err
			}
			sb, err := Start(context.Background(), Options{
				Image: Image{Kernel: "k", Initrd: "i"}, RunDir: t.TempDir(), BootTimeout: time.Minute,
				NewMachine: func(cfg vm.Config) (vm.Machine, error) { return vmtest.New(cfg, boot), nil },
			})
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tt.disk && strings.Contains(tt.name, "layer"):
				if sb.layerLock, err = LockLayerDisk(filepath.Join(t.TempDir(), "layer.img")); err != nil {
					t.Fatal(err)
				}
			case tt.disk:
				if sb.diskLock, err = LockDataDisk(filepath.Join(t.TempDir(), "data.img")); err != nil {
					t.Fatal(err)
				}
			}
			closeFn := sb.Close
			if tt.idle {
				closeFn = sb.CloseIdle
			}
			if err := closeFn(context.Background()); err != nil {
				t.Fatal(err)
			}
			if poweredOff := <-ended == nil; poweredOff != tt.wantPowOff {
				t.Errorf("the guest powered itself off: %v, want %v", poweredOff, tt.wantPowOff)
			}
		})
	}
}

// TestStartReadyAfterLongInit: the guest dials the readiness stream early
// and writes on it once its init ends, which on a loaded host (a blank
// layer disk to format) takes longer than any short bound; the host keeps
// the stream until the boot's deadline, so the write is not lost.
func TestStartReadyAfterLongInit(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a long init")
	}
	a := &fakeAgent{off: make(chan struct{})}
	boot := func(ctx context.Context, g *vmtest.Guest) error {
		l, err := g.Listen(api.PortAgent)
		if err != nil {
			return err
		}
		defer l.Close()
		go execwire.ServeAgent(l, a, nil)
		c, err := g.Dial(ctx, api.PortReady)
		if err != nil {
			return err
		}
		select {
		case <-time.After(6 * time.Second):
		case <-ctx.Done():
			return ctx.Err()
		}
		api.WriteReady(c, api.Ready{AgentVersion: "late"})
		c.Close()
		select {
		case <-a.off:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	sb, _, err := startWith(t, boot, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if v := sb.Ready().AgentVersion; v != "late" {
		t.Errorf("ready from %q, want the late one", v)
	}
	sb.Close(context.Background())
}
