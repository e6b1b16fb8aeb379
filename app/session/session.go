// Package session keeps one guest warm for one workspace, so a task starts in
// milliseconds instead of a boot. A Session owns at most one sandbox at a
// time: it boots it on Start, watches the machine and the guest agent while
// it runs, brings it back with bounded back-off when it dies, and shuts it
// down in order on Stop and Close, leaving no VM process behind.
//
// Every VM a session boots gets the next generation number. Agent returns
// the generation with the client, and Config.OnLost (or an EventLost) names
// the generation that died, so the task layer can mark that VM's tasks lost.
//
// One goroutine, the supervisor, makes every transition; the exported
// methods hand it commands and Status reads a snapshot, so all methods are
// safe for concurrent use.
package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"

	"github.com/airlock-sandbox/airlock/app/sandbox"
	"github.com/airlock-sandbox/airlock/app/workspace"
	"github.com/airlock-sandbox/airlock/guest/api"
	"github.com/airlock-sandbox/airlock/guest/client"
	"github.com/airlock-sandbox/airlock/vm"
)

// Errors a session returns; check them with errors.Is.
var (
	// ErrClosed is returned by every method after Close.
	ErrClosed = errors.New("session closed")
	// ErrStopped means no VM runs because none was asked for.
	ErrStopped = errors.New("the sandbox is stopped; start it first")
	// ErrFailed means the session gave up restarting the VM; the error
	// carries the last cause.
	ErrFailed = errors.New("the sandbox failed")
	// ErrMachineExited is the cause of a loss when the VM exited by itself.
	ErrMachineExited = errors.New("the virtual machine exited unexpectedly")
	// ErrAgentUnresponsive is the cause of a loss when the guest agent
	// stopped answering health checks.
	ErrAgentUnresponsive = errors.New("the guest agent stopped answering")
	// ErrAgentRestarting is the cause of a loss when the guest restarted its
	// agent more often than HealthPolicy.Reconnects allows.
	ErrAgentRestarting = errors.New("the guest agent keeps restarting")
)

// Sandbox is what a session needs of a booted guest; *sandbox.Sandbox is one.
type Sandbox interface {
	Agent() *client.Client
	Machine() vm.Machine
	// Ready is what the guest announced at boot.
	Ready() api.Ready
	Close(ctx context.Context) error
}

// StartFunc boots a sandbox and returns once its agent is ready. It must
// give up, leaving nothing running, when ctx is cancelled.
type StartFunc func(ctx context.Context, o sandbox.Options) (Sandbox, error)

// StartSandbox is the default StartFunc: sandbox.Start.
func StartSandbox(ctx context.Context, o sandbox.Options) (Sandbox, error) {
	sb, err := sandbox.Start(ctx, o)
	if err != nil {
		return nil, err
	}
	return sb, nil
}

// Folder is a validated workspace folder and the ids the guest's task user
// gets so that files it writes belong to the folder's owner.
type Folder struct {
	Path     string
	UID, GID uint32
}

// ResolveFunc validates a folder to share and finds its owner.
type ResolveFunc func(dir string) (Folder, error)

// ResolveLocal is the default ResolveFunc: app/workspace's rules for this
// machine, and the folder's owner.
func ResolveLocal(dir string) (Folder, error) {
	host, err := workspace.Local(runtime.GOOS)
	if err != nil {
		return Folder{}, err
	}
	p, err := host.Validate(dir)
	if err != nil {
		return Folder{}, err
	}
	uid, gid := workspace.Owner(p)
	return Folder{Path: p, UID: uid, GID: gid}, nil
}

// Config configures a session. Only Sandbox.Image is required.
type Config struct {
	// Sandbox is the template every boot starts from: workspace (already
	// validated), read-only, CPUs, memory, image, egress gate, boot timeout.
	// SetWorkspace changes its Workspace, ReadOnly, UID and GID; RunDir,
	// ConsoleLog and NewMachine are filled in per boot (a NewMachine set
	// here is still the one used).
	Sandbox sandbox.Options
	// RunDir holds each boot's runtime folder (vm-N, removed after that VM
	// stops) and, unless Sandbox.ConsoleLog is set, console.log of the
	// latest boot and console.log.1 of the one before. A temporary folder
	// is made, and removed on Close, when empty.
	RunDir string
	// Start boots one sandbox; nil means StartSandbox.
	Start StartFunc
	// Resolve validates SetWorkspace's folder; nil means ResolveLocal.
	Resolve ResolveFunc
	// Restart and Health tune failure detection and recovery.
	Restart RestartPolicy
	Health  HealthPolicy
	// Clock is the time source; nil means the real clock.
	Clock Clock
	// Logger receives the session's diagnostics; nil discards them.
	Logger *slog.Logger
	// OnLost, when set, is called with the generation of a VM that died
	// unexpectedly (and why), after the session marked itself down and
	// before the next VM boots: the task layer marks that VM's tasks lost.
	// It runs on the supervisor goroutine, so it must return promptly and
	// must not call the Session's blocking methods (Status is fine).
	OnLost func(generation int, err error)
}

// Session owns the VM of one workspace. Create it with New.
type Session struct {
	cfg   Config
	clock Clock
	log   *slog.Logger

	cmds chan command
	kick chan struct{} // cut a back-off short (Agent wants a VM now)
	poke chan struct{} // check the running VM's agent now (CheckAgent)
	done chan struct{} // the supervisor has ended

	mu      sync.Mutex
	snap    snapshot
	changed chan struct{} // closed and replaced on every change of snap
	subs    map[*subscriber]struct{}
	closed  bool
}

// New returns a stopped session; Start boots its VM. Close releases it.
func New(cfg Config) *Session {
	if cfg.Start == nil {
		cfg.Start = StartSandbox
	}
	if cfg.Resolve == nil {
		cfg.Resolve = ResolveLocal
	}
	if cfg.Clock == nil {
		cfg.Clock = realClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Sandbox.Logger == nil {
		cfg.Sandbox.Logger = cfg.Logger
	}
	if cfg.Sandbox.CPUs == 0 {
		cfg.Sandbox.CPUs = sandbox.DefaultCPUs
	}
	if cfg.Sandbox.MemoryMiB == 0 {
		cfg.Sandbox.MemoryMiB = sandbox.DefaultMemoryMiB
	}
	cfg.Restart = cfg.Restart.withDefaults()
	cfg.Health = cfg.Health.withDefaults()
	s := &Session{
		cfg: cfg, clock: cfg.Clock, log: cfg.Logger,
		cmds: make(chan command), kick: make(chan struct{}, 1), poke: make(chan struct{}, 1), done: make(chan struct{}),
		changed: make(chan struct{}), subs: map[*subscriber]struct{}{},
	}
	s.snap = snapshot{
		state: StateStopped, since: s.clock.Now(),
		workspace: cfg.Sandbox.Workspace, readOnly: cfg.Sandbox.ReadOnly,
		cpus: cfg.Sandbox.CPUs, mem: cfg.Sandbox.MemoryMiB, image: cfg.Sandbox.Image.Name, kernel: cfg.Sandbox.Image.KernelRelease, keepDisk: cfg.Sandbox.DiskDir != "", consoleLog: cfg.Sandbox.ConsoleLog,
	}
	sup := newSupervisor(s)
	go sup.run()
	return s
}

type op int

const (
	opStart op = iota
	opStop
	opRestart
	opWorkspace
	opImage
	opSize
	opClose
)

type command struct {
	op      op
	ctx     context.Context
	folder  Folder
	ro      bool
	image   sandbox.Image // opImage
	diskDir string        // opImage
	cpus    int           // opSize
	mem     int           // opSize, MiB
	reply   chan error
}

// do hands c to the supervisor and waits for its answer.
func (s *Session) do(ctx context.Context, c command) error {
	c.ctx, c.reply = ctx, make(chan error, 1)
	select {
	case s.cmds <- c:
	case <-s.done:
		return ErrClosed
	case <-ctx.Done():
		return fmt.Errorf("session: %w", ctx.Err())
	}
	select {
	case err := <-c.reply:
		return err
	case <-ctx.Done():
		return fmt.Errorf("session: %w", ctx.Err())
	}
}

// Start boots the VM if none is running or booting, and waits until it runs.
// A failed boot is retried under the restart policy; Start returns the
// error once the session gives up (ErrFailed). When ctx ends first, Start
// returns but the boot goes on. Start on a failed session tries afresh.
func (s *Session) Start(ctx context.Context) error {
	if err := s.do(ctx, command{op: opStart}); err != nil {
		return err
	}
	_, _, err := s.await(ctx, false)
	return err
}

// Stop shuts the VM down in order (cancelling a boot in progress) and waits
// until no VM process is left. When ctx ends, the VM is forced off sooner.
func (s *Session) Stop(ctx context.Context) error {
	return s.do(ctx, command{op: opStop})
}

// Restart replaces the VM with a fresh one (starting one when stopped) and
// waits until it runs. It resets the restart policy's failure count.
func (s *Session) Restart(ctx context.Context) error {
	if err := s.do(ctx, command{op: opRestart}); err != nil {
		return err
	}
	_, _, err := s.await(ctx, false)
	return err
}

// SetWorkspace shares dir (read-only if asked) from the next boot on; an
// empty dir shares no folder. A folder that may not be shared is refused
// before the running VM is touched. Unless the session is stopped, the VM is
// restarted on the new folder and SetWorkspace waits until it runs.
func (s *Session) SetWorkspace(ctx context.Context, dir string, readOnly bool) error {
	var f Folder
	if dir != "" {
		var err error
		if f, err = s.cfg.Resolve(dir); err != nil {
			return fmt.Errorf("session: workspace: %w", err)
		}
	}
	if err := s.do(ctx, command{op: opWorkspace, folder: f, ro: readOnly}); err != nil {
		return err
	}
	if s.Status().State == StateStopped {
		return nil
	}
	_, _, err := s.await(ctx, false)
	return err
}

// SetImage changes the guest image, and where the persistent disks of an
// image with a root disk live ("" for none: sandbox.Options.DiskDir). A
// running VM is replaced by one booted from the new image.
func (s *Session) SetImage(ctx context.Context, img sandbox.Image, diskDir string) error {
	if err := s.do(ctx, command{op: opImage, image: img, diskDir: diskDir}); err != nil {
		return err
	}
	if s.Status().State == StateStopped {
		return nil
	}
	_, _, err := s.await(ctx, false)
	return err
}

// SetSize sets the CPUs and memory (MiB) of the VMs booted from now on; a
// running VM keeps its size until it next starts (Restart, or after a
// crash), since neither can change under a running guest. Status reports
// the running VM's size, or the new one while none runs.
func (s *Session) SetSize(ctx context.Context, cpus, memoryMiB int) error {
	if cpus < 1 || memoryMiB < 1 {
		return fmt.Errorf("session: size: %d CPUs, %d MiB", cpus, memoryMiB)
	}
	return s.do(ctx, command{op: opSize, cpus: cpus, mem: memoryMiB})
}

// Close stops the VM, ends every subscription and releases the session.
// Later calls to any method return ErrClosed; Close itself returns nil.
func (s *Session) Close(ctx context.Context) error {
	err := s.do(ctx, command{op: opClose})
	if errors.Is(err, ErrClosed) {
		return nil
	}
	return err
}

// Agent returns the running VM's agent client and its generation, waiting
// (bounded by ctx) while the VM boots or restarts; a back-off in progress is
// cut short. It fails at once with ErrStopped or ErrFailed. The client
// stops working when that VM goes away; a task that fails then should call
// Agent again and compare generations.
func (s *Session) Agent(ctx context.Context) (*client.Client, int, error) {
	return s.await(ctx, true)
}

// await waits for a running VM, a failure or a stop. With kick set, a
// pending back-off is cut short.
func (s *Session) await(ctx context.Context, kick bool) (*client.Client, int, error) {
	for {
		s.mu.Lock()
		st, ch := s.snap, s.changed
		closed := s.closed
		s.mu.Unlock()
		switch {
		case closed:
			return nil, 0, ErrClosed
		case st.state == StateRunning:
			return st.agent, st.gen, nil
		case st.state == StateFailed:
			return nil, 0, fmt.Errorf("%w: %w", ErrFailed, st.lastErr)
		case st.state == StateStopped:
			return nil, 0, ErrStopped
		}
		if kick && st.state == StateRestarting && !st.retryAt.IsZero() {
			select {
			case s.kick <- struct{}{}:
			default:
			}
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, 0, fmt.Errorf("session: waiting for the sandbox (%s, %s): %w", st.state, st.phase, ctx.Err())
		}
	}
}

// Status returns a snapshot of the session.
func (s *Session) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snap.status(s.clock.Now())
}

// update changes the snapshot, wakes waiters and tells subscribers.
func (s *Session) update(f func(*snapshot)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(&s.snap)
	close(s.changed)
	s.changed = make(chan struct{})
	now := s.clock.Now()
	st := s.snap.status(now)
	s.publishLocked(Event{Kind: EventState, Time: now, Status: &st})
}

// progress records a boot phase if attempt is still the boot in progress.
func (s *Session) progress(attempt int, phase string) {
	s.mu.Lock()
	current := s.snap.state == StateStarting && s.snap.attempt == attempt && s.snap.phase != phase
	s.mu.Unlock()
	if !current {
		return
	}
	s.log.Debug("boot progress", "attempt", attempt, "phase", phase)
	s.update(func(sn *snapshot) {
		if sn.state == StateStarting && sn.attempt == attempt {
			sn.phase = phase
		}
	})
}

// CheckAgent asks for the running VM's agent to be checked now rather
// than at the next health check: the caller's connection to it broke. A
// restarted agent is then taken up at once (AgentRestarts counts it) and
// a task waiting for it need not wait for the next check; a check that
// fails is tried again shortly for one health interval, without counting
// as a miss.
func (s *Session) CheckAgent() {
	select {
	case s.poke <- struct{}{}:
	default:
	}
}
