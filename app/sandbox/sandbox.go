// Package sandbox boots one guest for one workspace and hands out the agent
// client: verify the image, start the machine, wait for the guest's readiness
// message (never polling), set its clock, and shut it down in order. It is
// the building block the CLI's one-shot `run` and the long-running session
// service share.
package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/app/clock"
	"github.com/airlock-sandbox/airlock/app/egress"
	"github.com/airlock-sandbox/airlock/guest/api"
	agentv1 "github.com/airlock-sandbox/airlock/guest/api/agent/v1"
	"github.com/airlock-sandbox/airlock/guest/client"
	"github.com/airlock-sandbox/airlock/internal/filelock"
	"github.com/airlock-sandbox/airlock/vm"
)

// readyMessageTime bounds a readiness message from its first byte to its
// last: the guest writes it at once, so only a dribbling guest needs it.
const readyMessageTime = 5 * time.Second

// ErrNotReady means the guest did not signal readiness in time.
var ErrNotReady = errors.New("guest did not become ready")

// ErrStalled means the guest's kernel reported itself stalled during boot
// (an RCU stall or a soft lockup on its console); it wraps ErrNotReady.
var ErrStalled = fmt.Errorf("%w: the guest kernel stalled", ErrNotReady)

// stallSigns are what a Linux kernel prints when it stalls: seen now and
// then under QEMU's TCG on a loaded host, where the boot then never ends.
var stallSigns = []string{"rcu: INFO: rcu_", "kthread starved for", "watchdog: BUG: soft lockup"}

// Options configure a sandbox.
type Options struct {
	// Workspace is the canonical folder to share (see app/workspace), or "".
	Workspace string
	ReadOnly  bool
	// ToolConfigWritable lists the (canonical) folders in which tasks may
	// change the files the user's tools run on the host (.git/config,
	// .git/hooks, .envrc, .vscode, .idea); in any other workspace the
	// guest makes them read-only to tasks (api.BootConfig).
	ToolConfigWritable []string
	CPUs               int
	MemoryMiB          int
	// Image is the verified guest image to boot.
	Image Image
	// DiskDir, for an image with a root disk, keeps the writable layer over
	// it on the workspace's persistent disk, DataDiskPath(DiskDir,
	// Workspace) (created blank when missing, see EnsureDataDisk); ""
	// keeps that layer in memory, empty every boot.
	DiskDir string
	// Changes holds the guest's changes to the workspace on a layer (the
	// overlay of api.BootConfig.Changes): the hypervisor shares the folder
	// read-only, and the layer disk LayerDisk (created blank when missing,
	// LayerDiskSize bytes; see EnsureLayerDisk) holds what tasks change,
	// which the host reads with the agent's ExportLayer. Not with ReadOnly.
	Changes bool
	// LayerDisk is the changes layer disk's path (LayerDiskPath), locked
	// while the VM runs; LayerDiskSize the size of a new one (0:
	// DefaultLayerDiskSize).
	LayerDisk     string
	LayerDiskSize int64
	// RunDir is a private folder for runtime files; a temporary one is made
	// (and removed on Close) when empty.
	RunDir string
	// ConsoleLog receives the guest's serial console; RunDir/console.log
	// when empty.
	ConsoleLog string
	// BootTimeout bounds the wait for the guest's readiness message.
	BootTimeout time.Duration
	// KernelArgs are extra kernel command line words (debugging).
	KernelArgs []string
	// ReclaimMemory gives the memory the guest frees back to the host
	// (vm.Config.ReclaimMemory): for a VM that outlives its tasks.
	ReclaimMemory bool
	// WarmUp runs one throwaway task (`true`) before Start returns, so
	// that the first real task does not pay for the guest's first process
	// start: for a VM that waits for its tasks (the service's), not one
	// whose task is already waiting.
	WarmUp bool
	// UID and GID of the guest's task user; zero means the defaults.
	UID, GID uint32
	Logger   *slog.Logger
	// NewMachine creates the machine; nil means the platform's default.
	NewMachine func(vm.Config) (vm.Machine, error)
	// Egress, when set, serves the guest's outbound connections (the
	// guest's proxies forward them to PortEgressHTTP and PortEgressSOCKS).
	// Without it the guest's connections are refused at once.
	Egress egress.Server
	// GuestCA, when set, is the PEM certificate of the installation CA:
	// it is added to the guest's trust store (egress.GuestCAFile and the
	// system bundle) after readiness, before any task runs.
	GuestCA []byte
}

// Defaults for Options fields left zero.
const (
	DefaultCPUs        = 2
	DefaultMemoryMiB   = 1024
	DefaultBootTimeout = 90 * time.Second
)

// Sandbox is a booted guest with a ready agent.
type Sandbox struct {
	m         vm.Machine
	agent     *client.Client
	ready     api.Ready
	bootTime  time.Duration
	runDir    string
	ownRunDir bool
	listeners []net.Listener // egress listeners, closed on Close
	stopClock context.CancelFunc
	diskLock  *filelock.Lock // held on the persistent disk while the VM runs
	layerLock *filelock.Lock // held on the changes layer disk while the VM runs
	log       *slog.Logger

	closeOnce sync.Once
	closeErr  error // the first Close's, returned by every later one
}

// Start boots a guest and waits until its agent is ready. On failure nothing
// is left running. A boot whose kernel stalls (ErrStalled: seen now and then
// under TCG on a loaded host) is abandoned as soon as the console says so,
// or when the kernel has not started init after initDeadline, and tried
// once more (that one waits out the whole boot timeout).
//
// A machine started from a saved state that fails (vm.Restorer: the
// backend has discarded that state) is started once more too, which then
// boots.
func Start(ctx context.Context, o Options) (*Sandbox, error) {
	sb, err := start(ctx, o, initDeadline)
	if ctx.Err() == nil {
		switch {
		case errors.Is(err, ErrStalled):
			if o.Logger != nil {
				o.Logger.Warn("the guest kernel stalled during boot; booting it once more", "err", err)
			}
			sb, err = start(ctx, o, 0)
		case errors.As(err, new(restoreFailed)):
			if o.Logger != nil {
				o.Logger.Warn("the machine's saved state failed; booting it instead", "err", err)
			}
			sb, err = start(ctx, o, initDeadline)
		}
	}
	return sb, err
}

// initDeadline is how long a first boot may take to start init (the
// api.InitRunning console line) before it counts as stalled. A guest's
// kernel starts init within about 1.5 s under TCG on an idle host and
// 3-4 s on a loaded one; only boot timeouts longer than twice this use
// it.
var initDeadline = 30 * time.Second

// restoreFailed is the error of a start whose machine started from a saved
// state that failed (vm.Restorer.RestoreFailed).
type restoreFailed struct{ error }

func (e restoreFailed) Unwrap() error { return e.error }

func start(ctx context.Context, o Options, initBy time.Duration) (_ *Sandbox, err error) {
	if o.CPUs == 0 {
		o.CPUs = DefaultCPUs
	}
	if o.MemoryMiB == 0 {
		o.MemoryMiB = DefaultMemoryMiB
	}
	if o.BootTimeout == 0 {
		o.BootTimeout = DefaultBootTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.NewMachine == nil {
		o.NewMachine = defaultMachine
	}
	s := &Sandbox{runDir: o.RunDir, log: o.Logger}
	if s.runDir == "" {
		if s.runDir, err = os.MkdirTemp("", "airlock-run-"); err != nil {
			return nil, fmt.Errorf("sandbox: runtime folder: %w", err)
		}
		s.ownRunDir = true
	} else if err := os.MkdirAll(s.runDir, 0o700); err != nil {
		return nil, fmt.Errorf("sandbox: runtime folder: %w", err)
	}
	defer func() {
		if err != nil && s.ownRunDir {
			os.RemoveAll(s.runDir)
		}
		if err != nil {
			s.diskLock.Unlock()
			s.layerLock.Unlock()
		}
		if r, ok := s.m.(vm.Restorer); ok && err != nil && r.RestoreFailed() {
			err = restoreFailed{err}
		}
	}()
	if o.ConsoleLog == "" {
		o.ConsoleLog = filepath.Join(s.runDir, "console.log")
	}
	boot := api.BootConfig{UID: o.UID, GID: o.GID}
	boot.ToolConfigWritable = o.Workspace != "" && slices.Contains(o.ToolConfigWritable, o.Workspace)
	var disks []vm.Disk
	if o.Image.RootDisk != "" {
		boot.Root = o.Image.RootLabel
		disks = append(disks, vm.Disk{Path: o.Image.RootDisk, ReadOnly: true, Format: vm.DiskRawVHD})
		if o.DiskDir != "" {
			data := DataDiskPath(o.DiskDir, o.Workspace)
			if s.diskLock, err = LockDataDisk(data); err != nil {
				return nil, err
			}
			if err := EnsureDataDisk(data, DefaultDataDiskSize); err != nil {
				return nil, err
			}
			boot.RootKeep = true
			disks = append(disks, vm.Disk{Path: data, Format: vm.DiskRawVHD})
		}
	} else if o.DiskDir != "" {
		return nil, fmt.Errorf("sandbox: a persistent disk needs an image with a root disk (standard); the %s image has none", o.Image.Name)
	}
	if o.Changes {
		if disks, err = s.attachLayer(o, &boot, disks); err != nil {
			return nil, err
		}
	}
	cfg := vm.Config{
		Kernel: o.Image.Kernel, Initrd: o.Image.Initrd, KernelHZ: o.Image.KernelHZ,
		Cmdline: append(boot.Args(), o.KernelArgs...),
		CPUs:    o.CPUs, MemoryMiB: o.MemoryMiB,
		Dir: s.runDir, ConsoleLog: o.ConsoleLog, Logger: o.Logger,
		Disks: disks, ReclaimMemory: o.ReclaimMemory,
	}
	if o.Workspace != "" {
		// With changes held the hypervisor keeps the folder read-only:
		// even guest root cannot write it.
		cfg.Share = &vm.Share{HostPath: o.Workspace, ReadOnly: o.ReadOnly || o.Changes}
	}
	if s.m, err = o.NewMachine(cfg); err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	if o.Egress != nil {
		if err := s.serveEgress(o.Egress); err != nil {
			s.stopMachine()
			return nil, err
		}
	}
	readyL, err := s.m.Listen(api.PortReady)
	if err != nil {
		// The machine exists before it boots (vz creates the framework's
		// VM in New): only Stop releases it.
		s.stopMachine()
		return nil, fmt.Errorf("sandbox: listen for readiness: %w", err)
	}
	defer readyL.Close()
	began := time.Now()
	consoleFrom := consoleEnd(o.ConsoleLog)
	if err := s.m.Start(ctx); err != nil {
		s.stopMachine()
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	if 2*initBy > o.BootTimeout {
		initBy = 0
	}
	if s.ready, err = s.awaitReady(ctx, readyL, o.BootTimeout, consoleFrom, initBy); err != nil {
		s.stopMachine()
		return nil, err
	}
	s.bootTime = time.Since(began)
	s.agent, err = client.New(s.m.Dial)
	if err != nil {
		s.stopMachine()
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.agent.SetTime(tctx, time.Now()); err != nil {
		s.stopMachine()
		s.closeAgent()
		return nil, fmt.Errorf("sandbox: guest agent does not answer after readiness: %w%s", err, consoleHint(o.ConsoleLog))
	}
	// A guest that is this host (vm.HostGuest) has the host's trust store.
	if len(o.GuestCA) > 0 && !vm.GuestIsHost(s.m) {
		if err := s.installCA(ctx, o.GuestCA); err != nil {
			s.agent.Close()
			s.stopMachine()
			return nil, err
		}
	}
	if o.WarmUp && !vm.GuestIsHost(s.m) {
		s.warmUp(ctx)
	}
	s.watchClock()
	s.log.Info("guest ready", "boot", s.bootTime, "agent", s.ready.AgentVersion, "accel", s.m.Info().Accelerator, "machine", s.m.Info().Machine,
		"restored", vm.Restored(s.m))
	return s, nil
}

// warmUp runs `true` in the guest once. The first task of a boot runs
// kernel and agent code nothing ran before, and under TCG that code is
// translated on the way: through the service the first `true` took 80-120
// ms and the next ones 20-30 (the CLI's own start included). A failure is
// only logged: the VM is up, and a task that cannot start says why itself.
func (s *Sandbox) warmUp(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	start := time.Now()
	if exit, err := s.agent.Exec(ctx, client.Spec{Argv: []string{"true"}}, client.Stdio{}); err != nil || exit.Code != 0 {
		s.log.Warn("warm-up task failed", "exit", exit.Code, "err", err)
		return
	}
	s.log.Debug("warm-up task", "took", time.Since(start))
}

// installCA makes the guest trust the gate's CA (the certificate only; the
// key never leaves the host).
func (s *Sandbox) installCA(ctx context.Context, pem []byte) error {
	ictx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err := s.agent.TrustCA(ictx, pem)
	if errors.Is(err, agentv1.ErrUnimplemented) {
		// An image built before the call existed (images/ builds the
		// guest from this source tree).
		return fmt.Errorf("sandbox: install the Airlock CA in the guest: the guest image's agent is older than this airlock; rebuild the image (make image): %w", err)
	}
	if err != nil {
		return fmt.Errorf("sandbox: install the Airlock CA in the guest: %w", err)
	}
	return nil
}

// awaitReady waits for the guest's readiness message, the machine's exit,
// the boot timeout or ctx, whichever comes first; or for a sign on the
// console, from offset consoleFrom on, that the kernel stalled or (with
// initBy > 0) had not started init after initBy (ErrStalled).
func (s *Sandbox) awaitReady(ctx context.Context, l net.Listener, timeout time.Duration, consoleFrom int64, initBy time.Duration) (api.Ready, error) {
	began := time.Now()
	got := make(chan api.Ready, 1)
	broken := make(chan error, 1)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				// The transport ended: either the machine is going away (its
				// exit is the error worth reporting) or the guest broke the
				// transport, and no readiness can come any more.
				s.log.Debug("readiness listener closed", "err", err)
				broken <- err
				return
			}
			// The guest is untrusted: its message is bounded in size
			// (ReadReady) and, once it has begun, in time. Its first byte
			// may take as long as the boot: the guest dials this stream
			// before its init ends (formatting a blank layer disk takes
			// seconds on a loaded host) and writes once init is done, and
			// a stream the host closed meanwhile would swallow that write
			// (a closed stream of the multiplexer drops what the peer
			// still sends), leaving the boot to wait for a readiness
			// already sent.
			_ = c.SetDeadline(began.Add(timeout))
			var first [1]byte
			_, err = io.ReadFull(c, first[:])
			var r api.Ready
			if err == nil {
				_ = c.SetDeadline(time.Now().Add(readyMessageTime))
				r, err = api.ReadReady(io.MultiReader(bytes.NewReader(first[:]), c))
			}
			c.Close()
			if err != nil {
				s.log.Warn("bad readiness message from guest", "err", err)
				continue
			}
			got <- r
			return
		}
	}()
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	exited := make(chan error, 1)
	go func() { exited <- s.m.Wait(wctx) }()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	info := s.m.Info()
	stalled := watchStall(wctx, info.ConsoleLog, consoleFrom, initBy)
	stopped := func(err error) (api.Ready, error) {
		if ctx.Err() != nil {
			return api.Ready{}, ctx.Err()
		}
		if err == nil {
			err = errors.New("it powered off")
		}
		return api.Ready{}, fmt.Errorf("%w: the machine stopped during boot (%w)%s", ErrNotReady, err, consoleHint(info.ConsoleLog))
	}
	select {
	case r := <-got:
		return r, nil
	case err := <-exited:
		return stopped(err)
	case berr := <-broken:
		// A machine that is exiting closes the transport first; give its
		// exit a moment to arrive, since that is the better explanation.
		select {
		case err := <-exited:
			return stopped(err)
		case <-time.After(2 * time.Second):
		case <-ctx.Done():
			return api.Ready{}, ctx.Err()
		}
		return api.Ready{}, fmt.Errorf("%w: the transport to the guest failed before it was ready (%v)%s", ErrNotReady, berr, consoleHint(info.ConsoleLog))
	case <-timer.C:
		return api.Ready{}, fmt.Errorf("%w within %s (accelerator %s)%s", ErrNotReady, timeout, info.Accelerator, consoleHint(info.ConsoleLog))
	case why := <-stalled:
		return api.Ready{}, fmt.Errorf("%w after %s (%s)%s", ErrStalled, time.Since(began).Round(time.Second), why, consoleHint(info.ConsoleLog))
	case <-ctx.Done():
		return api.Ready{}, ctx.Err()
	}
}

// serveEgress listens for the guest's proxies before the guest boots, so its
// first connection already finds the gate.
func (s *Sandbox) serveEgress(g egress.Server) error {
	for _, p := range []struct {
		port  uint32
		serve func(net.Listener) error
	}{{api.PortEgressHTTP, g.ServeHTTPProxy}, {api.PortEgressSOCKS, g.ServeSOCKS}} {
		l, err := s.m.Listen(p.port)
		if err != nil {
			return fmt.Errorf("sandbox: listen for egress on port %d: %w", p.port, err)
		}
		s.listeners = append(s.listeners, l)
		go func() {
			if err := p.serve(l); err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, egress.ErrClosed) {
				s.log.Debug("egress listener ended", "port", p.port, "err", err)
			}
		}()
	}
	return nil
}

// watchClock resets the guest's clock whenever the host's wall clock jumps
// (sleep and wake, or a manual change), until Close.
func (s *Sandbox) watchClock() {
	ctx, cancel := context.WithCancel(context.Background())
	s.stopClock = cancel
	w := clock.New(clock.Options{}, func(ctx context.Context, j clock.Jump) {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := s.agent.SetTime(sctx, time.Now()); err != nil {
			s.log.Warn("guest clock resync failed", "skew", j.Skew, "err", err)
			return
		}
		s.log.Info("guest clock resynced after a host clock jump", "skew", j.Skew)
	})
	go w.Run(ctx)
}

// Agent is the client of the guest agent.
func (s *Sandbox) Agent() *client.Client { return s.agent }

// Machine is the underlying machine.
func (s *Sandbox) Machine() vm.Machine { return s.m }

// Ready is what the guest reported when it became ready.
func (s *Sandbox) Ready() api.Ready { return s.ready }

// BootTime is the time from Start to the readiness message.
func (s *Sandbox) BootTime() time.Duration { return s.bootTime }

// Close shuts the guest down in order: the agent syncs and powers off; if it
// does not within the grace period, the machine is stopped by force. Nothing
// is left running when Close returns. Close may be called more than once,
// from any goroutine: only the first shuts down; the rest return its error.
func (s *Sandbox) Close(ctx context.Context) error { return s.close(ctx, false) }

// CloseIdle is Close for a guest that runs no task any more (the CLI's,
// after its one task ended, and with it whatever the task left running):
// once the agent has answered the shutdown, which it does after syncing the
// guest's file systems, the machine is stopped at once. The rest of the
// guest's power-off ends processes, unmounts the workspace and powers off,
// which keeps nothing and, on a machine started from a template, runs code
// its QEMU never ran, slow under TCG (docs/performance.md, What changed:
// templates). The workspace's writes are on the host already: 9p with
// cache=mmap writes through, and writes a shared mapping back when it is
// unmapped, as it is when the task that made it ends, synced or not; the
// agent's sync before its answer flushes anything else. A machine with a
// persistent disk still powers off in order: its file system is unmounted
// cleanly.
//
// So does a machine with a changes layer: its layer's file system (which
// has no journal) is unmounted cleanly before the power-off.
func (s *Sandbox) CloseIdle(ctx context.Context) error {
	return s.close(ctx, s.diskLock == nil && s.layerLock == nil)
}

// close shuts the sandbox down once; later calls, of either kind, wait for
// the first and return its error.
func (s *Sandbox) close(ctx context.Context, synced bool) error {
	s.closeOnce.Do(func() { s.closeErr = s.shutdown(ctx, synced) })
	return s.closeErr
}

func (s *Sandbox) shutdown(ctx context.Context, synced bool) error {
	if s.stopClock != nil {
		s.stopClock()
	}
	if s.agent != nil {
		sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		err := s.agent.Shutdown(sctx, false)
		cancel()
		if err == nil && !synced {
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_ = s.m.Wait(wctx)
			cancel()
		} else if err != nil {
			s.log.Warn("guest agent did not accept shutdown; stopping the machine", "err", err)
		}
	}
	// The machine goes first: closing the agent's connection writes to the
	// guest, which blocks for good when the guest no longer reads (a frozen
	// VM), and the transport only fails those writes once the machine is gone.
	err := s.stopMachine()
	if s.agent != nil {
		s.closeAgent()
	}
	if err == nil {
		// A machine that would not stop may still write to the disk; its
		// lock then goes with this process.
		s.diskLock.Unlock()
		s.layerLock.Unlock()
	}
	if s.ownRunDir {
		os.RemoveAll(s.runDir)
	}
	return err
}

// agentCloseTimeout bounds closing the agent's connection after the machine
// stopped; a transport that still does not fail its writes must not hang
// the caller (the session's supervisor) for good.
const agentCloseTimeout = 10 * time.Second

func (s *Sandbox) closeAgent() {
	done := make(chan struct{})
	go func() {
		s.agent.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(agentCloseTimeout):
		s.log.Warn("the guest agent's connection did not close; leaving it behind", "after", agentCloseTimeout)
	}
}

func (s *Sandbox) stopMachine() error {
	for _, l := range s.listeners {
		l.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.m.Stop(ctx); err != nil {
		return fmt.Errorf("sandbox: stop machine: %w", err)
	}
	return nil
}

// attachLayer locks the changes layer disk (creating it blank when
// missing), tells the guest to hold its changes on it, and adds it to
// disks.
func (s *Sandbox) attachLayer(o Options, boot *api.BootConfig, disks []vm.Disk) ([]vm.Disk, error) {
	switch {
	case o.Workspace == "":
		return nil, errors.New("sandbox: holding changes needs a workspace")
	case o.ReadOnly:
		return nil, errors.New("sandbox: a read-only workspace has no changes to hold; ask for one or the other")
	case o.LayerDisk == "" || !filepath.IsAbs(o.LayerDisk):
		return nil, fmt.Errorf("sandbox: holding changes needs the layer disk's absolute path (LayerDiskPath), not %q", o.LayerDisk)
	}
	size := o.LayerDiskSize
	if size == 0 {
		size = DefaultLayerDiskSize
	}
	var err error
	if s.layerLock, err = LockLayerDisk(o.LayerDisk); err != nil {
		return nil, err
	}
	if err := EnsureLayerDisk(o.LayerDisk, size); err != nil {
		return nil, err
	}
	boot.Changes = true
	return append(disks, vm.Disk{Path: o.LayerDisk, Format: vm.DiskRawVHD}), nil
}
