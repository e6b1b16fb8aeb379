package session

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/airlock-sandbox/airlock/app/sandbox"
	"github.com/airlock-sandbox/airlock/vm"
	"github.com/airlock-sandbox/airlock/vm/platform"
)

// supervisor is the one goroutine that boots, watches and stops VMs. Its
// fields are its own; what others may read goes to Session.snap.
type supervisor struct {
	s    *Session
	tmpl sandbox.Options // the next boot's options
	want bool            // a VM is wanted (Start was called, Stop was not)

	runDir    string
	ownRunDir bool

	attempt int // boot attempts so far; names runtime folders
	gen     int // VMs booted so far
	boot    *bootRun
	retry   <-chan time.Time // the end of a back-off, or nil

	sb      Sandbox // the running VM, or nil
	sbDir   string
	upSince time.Time
	mon     *monitor

	backoff  backoff
	restarts int
}

type bootRun struct {
	attempt int
	dir     string
	began   time.Time
	cancel  context.CancelFunc
	done    chan bootResult // buffered: the boot never waits for the supervisor
}

type bootResult struct {
	sb  Sandbox
	err error
}

func newSupervisor(s *Session) *supervisor {
	return &supervisor{s: s, tmpl: s.cfg.Sandbox, runDir: s.cfg.RunDir, backoff: backoff{p: s.cfg.Restart}}
}

func (l *supervisor) run() {
	defer close(l.s.done)
	for {
		var booted <-chan bootResult
		if l.boot != nil {
			booted = l.boot.done
		}
		var lost <-chan error
		if l.mon != nil {
			lost = l.mon.lost
		}
		select {
		case c := <-l.s.cmds:
			err := l.handle(c)
			if c.op == opClose {
				l.finish()
				c.reply <- err
				return
			}
			c.reply <- err
		case r := <-booted:
			l.booted(r)
		case err := <-lost:
			l.lost(err)
		case <-l.retry:
			l.retry = nil
			l.startBoot()
		case <-l.s.kick:
			if l.retry != nil {
				l.retry = nil
				l.startBoot()
			}
		}
	}
}

func (l *supervisor) handle(c command) error {
	switch c.op {
	case opStart:
		l.want = true
		if l.sb != nil || l.boot != nil {
			return nil
		}
		if l.retry == nil {
			l.backoff.reset() // stopped or failed: a fresh budget
		}
		l.retry = nil
		l.startBoot()
	case opRestart:
		l.want = true
		err := l.teardown(c.ctx, StateRestarting)
		l.backoff.reset()
		l.startBoot()
		if err != nil {
			l.s.log.Warn("restart: the previous VM did not stop cleanly", "err", err)
		}
	case opWorkspace:
		l.tmpl.Workspace, l.tmpl.UID, l.tmpl.GID = c.folder.Path, c.folder.UID, c.folder.GID
		l.tmpl.ReadOnly = c.ro
		l.s.update(func(sn *snapshot) { sn.workspace, sn.readOnly = c.folder.Path, c.ro })
		l.s.log.Info("workspace set", "dir", c.folder.Path, "read_only", c.ro, "restart", l.want)
		if !l.want {
			return nil
		}
		err := l.teardown(c.ctx, StateRestarting)
		l.backoff.reset()
		l.startBoot()
		if err != nil {
			l.s.log.Warn("workspace change: the previous VM did not stop cleanly", "err", err)
		}
	case opImage:
		l.tmpl.Image, l.tmpl.DiskDir = c.image, c.diskDir
		l.s.update(func(sn *snapshot) {
			sn.image, sn.kernel, sn.keepDisk = c.image.Name, c.image.KernelRelease, c.diskDir != ""
		})
		l.s.log.Info("image set", "image", c.image.Name, "keep_disk", c.diskDir != "", "restart", l.want)
		if !l.want {
			return nil
		}
		err := l.teardown(c.ctx, StateRestarting)
		l.backoff.reset()
		l.startBoot()
		if err != nil {
			l.s.log.Warn("image change: the previous VM did not stop cleanly", "err", err)
		}
	case opSize:
		l.tmpl.CPUs, l.tmpl.MemoryMiB = c.cpus, c.mem
		if l.sb == nil && l.boot == nil {
			l.s.update(func(sn *snapshot) { sn.cpus, sn.mem = c.cpus, c.mem })
		}
		l.s.log.Info("size set", "cpus", c.cpus, "memory_mib", c.mem, "applies", "next start")
	case opStop, opClose:
		l.want = false
		err := l.teardown(c.ctx, StateStopping)
		l.s.update(func(sn *snapshot) { sn.state, sn.phase, sn.since = StateStopped, "", l.s.clock.Now() })
		return err
	}
	return nil
}

// finish releases what the session owns once the last VM is gone.
func (l *supervisor) finish() {
	if l.ownRunDir {
		os.RemoveAll(l.runDir)
	}
	s := l.s
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	close(s.changed)
	s.changed = make(chan struct{})
	s.closeSubscribersLocked()
}

// startBoot begins a boot in its own goroutine; booted gets the result.
func (l *supervisor) startBoot() {
	l.attempt++
	ctx, cancel := context.WithCancel(context.Background())
	b := &bootRun{attempt: l.attempt, began: l.s.clock.Now(), cancel: cancel, done: make(chan bootResult, 1)}
	l.boot = b
	opts, err := l.bootOptions(b)
	l.s.update(func(sn *snapshot) {
		sn.state, sn.phase, sn.since, sn.attempt = StateStarting, PhasePreparing, b.began, b.attempt
		sn.retryAt, sn.consoleLog = time.Time{}, opts.ConsoleLog
		sn.cpus, sn.mem = l.tmpl.CPUs, l.tmpl.MemoryMiB
	})
	l.s.log.Info("booting", "attempt", b.attempt, "workspace", opts.Workspace)
	if err != nil {
		b.done <- bootResult{err: err}
		return
	}
	go func() {
		sb, err := l.s.cfg.Start(ctx, opts)
		if sb == nil && err == nil {
			err = errors.New("the start function returned no sandbox")
		}
		b.done <- bootResult{sb: sb, err: err}
	}()
}

// bootOptions fills the template in for one boot: a fresh runtime folder,
// the console log, and a machine that reports boot progress.
func (l *supervisor) bootOptions(b *bootRun) (sandbox.Options, error) {
	o := l.tmpl
	if l.runDir == "" {
		d, err := os.MkdirTemp("", "airlock-session-")
		if err != nil {
			return o, fmt.Errorf("session: runtime folder: %w", err)
		}
		l.runDir, l.ownRunDir = d, true
	}
	b.dir = filepath.Join(l.runDir, fmt.Sprintf("vm-%d", b.attempt))
	o.RunDir = b.dir
	os.RemoveAll(b.dir) // leftovers of an earlier process: stale sockets confuse the backend
	if err := os.MkdirAll(b.dir, 0o700); err != nil {
		return o, fmt.Errorf("session: runtime folder: %w", err)
	}
	if o.ConsoleLog == "" {
		// Keep the previous VM's console: it explains why that VM died.
		o.ConsoleLog = filepath.Join(l.runDir, "console.log")
		_ = os.Rename(o.ConsoleLog, o.ConsoleLog+".1")
	}
	newMachine := o.NewMachine
	if newMachine == nil {
		newMachine = platform.New
	}
	progress := func(phase string) { l.s.progress(b.attempt, phase) }
	o.NewMachine = func(cfg vm.Config) (vm.Machine, error) {
		progress(PhaseCreatingMachine)
		m, err := newMachine(cfg)
		if err != nil {
			return nil, err
		}
		return &trackedMachine{Machine: m, progress: progress}, nil
	}
	return o, nil
}

// booted takes the result of the boot in progress.
func (l *supervisor) booted(r bootResult) {
	b := l.boot
	l.boot = nil
	b.cancel()
	now := l.s.clock.Now()
	if r.err != nil {
		os.RemoveAll(b.dir)
		l.s.log.Warn("boot failed", "attempt", b.attempt, "err", r.err)
		l.failed(fmt.Errorf("session: boot: %w", r.err), 0, permanent(r.err))
		return
	}
	l.gen++
	l.sb, l.sbDir, l.upSince = r.sb, b.dir, now
	gen := l.gen
	l.mon = watch(r.sb, l.s.cfg.Health, l.s.clock, l.s.log.With("generation", gen), l.s.poke, func(n int) {
		l.s.mu.Lock()
		l.s.publishLocked(Event{Kind: EventReconnected, Time: l.s.clock.Now(), Generation: gen,
			Error: "the guest agent restarted; tasks that were running on it are lost"})
		l.s.mu.Unlock()
		l.s.update(func(sn *snapshot) {
			if sn.gen == gen && sn.state == StateRunning {
				sn.agentRestarts = n
			}
		})
	})
	info := r.sb.Machine().Info()
	boot := now.Sub(b.began)
	l.s.log.Info("VM running", "generation", l.gen, "boot", boot, "accel", info.Accelerator, "machine", info.Machine, "pid", info.PID)
	l.s.update(func(sn *snapshot) {
		sn.state, sn.phase, sn.since, sn.gen = StateRunning, "", now, l.gen
		sn.accel, sn.machine, sn.pid, sn.bootTime, sn.upSince = info.Accelerator, info.Machine, info.PID, boot, now
		sn.agentRestarts = 0
		sn.agent, sn.failures = r.sb.Agent(), l.backoff.failures
		if info.ConsoleLog != "" {
			sn.consoleLog = info.ConsoleLog
		}
	})
}

// lost handles the death of the running VM: mark the session down, tell the
// task layer, clear the VM away and retry under the policy.
func (l *supervisor) lost(cause error) {
	gen, uptime := l.gen, l.s.clock.Now().Sub(l.upSince)
	l.mon.stop()
	l.mon = nil
	l.restarts++
	l.s.log.Warn("VM lost", "generation", gen, "uptime", uptime, "err", cause)
	l.s.update(func(sn *snapshot) {
		sn.state, sn.phase, sn.since, sn.agent = StateRestarting, PhaseStoppingMachine, l.s.clock.Now(), nil
		sn.lastErr, sn.restarts = cause, l.restarts
	})
	l.s.mu.Lock()
	l.s.publishLocked(Event{Kind: EventLost, Time: l.s.clock.Now(), Generation: gen, Error: cause.Error()})
	l.s.mu.Unlock()
	if l.s.cfg.OnLost != nil {
		l.s.cfg.OnLost(gen, cause)
	}
	// The VM is dead or its agent is: an orderly shutdown has no one to
	// talk to, so Close goes straight to forcing the machine off.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.closeSandbox(ctx); err != nil {
		l.s.log.Warn("clearing the lost VM", "generation", gen, "err", err)
	}
	l.failed(cause, uptime, false)
}

// failed schedules the next boot after a failure, or gives up.
func (l *supervisor) failed(cause error, uptime time.Duration, permanent bool) {
	delay, giveUp := l.backoff.fail(uptime)
	now := l.s.clock.Now()
	if giveUp || permanent {
		l.s.log.Error("giving up", "failures", l.backoff.failures, "err", cause)
		l.s.update(func(sn *snapshot) {
			sn.state, sn.phase, sn.since, sn.agent = StateFailed, "", now, nil
			sn.lastErr, sn.failures, sn.retryAt = cause, l.backoff.failures, time.Time{}
		})
		return
	}
	l.retry = l.s.clock.After(delay)
	l.s.log.Info("retrying", "in", delay, "failures", l.backoff.failures)
	l.s.update(func(sn *snapshot) {
		sn.state, sn.phase, sn.since, sn.agent = StateRestarting, PhaseWaitingToRetry, now, nil
		sn.lastErr, sn.failures, sn.retryAt = cause, l.backoff.failures, now.Add(delay)
	})
}

// teardown cancels a boot, a back-off and the running VM, in state (stopping
// or restarting), and returns once no VM is left.
func (l *supervisor) teardown(ctx context.Context, state State) error {
	l.s.update(func(sn *snapshot) {
		sn.state, sn.phase, sn.since, sn.agent = state, PhaseStoppingMachine, l.s.clock.Now(), nil
		sn.retryAt = time.Time{}
	})
	l.retry = nil
	var errs []error
	if b := l.boot; b != nil {
		l.boot = nil
		b.cancel()
		r := <-b.done
		if r.sb != nil { // it was ready just as it was cancelled
			errs = append(errs, r.sb.Close(ctx))
		}
		os.RemoveAll(b.dir)
	}
	if l.mon != nil {
		l.mon.stop()
		l.mon = nil
	}
	errs = append(errs, l.closeSandbox(ctx))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("session: stop: %w", err)
	}
	return nil
}

// closeSandbox shuts the running VM down and removes its runtime folder.
func (l *supervisor) closeSandbox(ctx context.Context) error {
	if l.sb == nil {
		return nil
	}
	err := l.sb.Close(ctx)
	os.RemoveAll(l.sbDir)
	l.s.log.Info("VM stopped", "generation", l.gen, "err", err)
	l.sb, l.sbDir = nil, ""
	return err
}

// permanent reports whether a boot error will not go away by retrying.
func permanent(err error) bool {
	return errors.Is(err, vm.ErrInvalidConfig) || errors.Is(err, vm.ErrNoHypervisor)
}
