package boot

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/guest/agent"
	"github.com/airlock-sandbox/airlock/guest/api"
	"github.com/airlock-sandbox/airlock/guest/console"
	"github.com/airlock-sandbox/airlock/guest/devices"
)

const (
	hostname    = "airlock"
	defaultPath = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
	// An agent that dies sooner than quickFail after starting counts as a
	// quick failure; after maxQuickFails in a row init gives up.
	quickFail     = 10 * time.Second
	maxQuickFails = 4
)

// pid1 is the state of init.
type pid1 struct {
	log     *slog.Logger
	cfg     api.BootConfig
	cmdline string    // the kernel command line
	boot    time.Time // when init started, for the agent restart policy

	run        AgentFunc
	agentOn    bool // an agent is running (or held)
	agentStart time.Time
	agentDone  chan error // the running agent's return
	agentStop  context.CancelFunc
	quickFails int
	workspace  bool // mounted, so unmount at power off

	// woken gets the host's Wake from the agent's transport on a guest
	// booted to park (api.BootConfig.Park).
	woken chan *api.Wake

	// sigs gets the signals init handles.
	sigs chan os.Signal
	// hold is closed when setup is done; an agent started during setup
	// waits on it (agent.Options.Hold).
	hold chan struct{}

	// The reaper (agent.Reaper): every child of PID 1 is reaped by
	// reapLoop; the agent's tasks are registered by Spawn, under reapMu,
	// before they can be reaped, and their status goes to their channel.
	reapMu  sync.Mutex
	waiting map[int]chan syscall.WaitStatus
	spawned chan struct{} // a child was started: reapLoop has one to wait for
}

// AgentFunc is the agent init runs: agent.Run, or a test's (tests/robust).
type AgentFunc func(ctx context.Context, log *slog.Logger, opts agent.Options) error

// Run is PID 1, with the agent (agent.Run) in it. It never returns: the
// guest ends by powering off.
func Run() { RunAgent(agent.Run) }

// RunAgent is Run with another agent.
//
// The agent runs in PID 1, not in a process of its own: under TCG the guest's
// first fork and exec of it, and a second Go runtime, would be the longest
// branch of the boot (docs/performance.md, Figures behind the code). Init
// runs it again if it returns (its transport failed); a panic in it panics
// the kernel, which ends the VM (panic=-1), and the host replaces the VM, as
// for any guest that dies.
func RunAgent(run AgentFunc) {
	in := &pid1{
		log: console.NewLogger(os.Stderr, "", false), boot: time.Now(), run: run,
		agentDone: make(chan error, 1),
		woken:     make(chan *api.Wake, 1),
		waiting:   make(map[int]chan syscall.WaitStatus),
		spawned:   make(chan struct{}, 1),
	}
	defer func() {
		if r := recover(); r != nil {
			in.fatal(fmt.Errorf("panic: %v\n%s", r, debug.Stack()))
		}
	}()
	// no_new_privs for everything PID 1 starts, set while its runtime has
	// few threads (each is stopped to set it): init, and the agent in it,
	// exec nothing that should gain privileges.
	if err := agent.RestrictPrivileges(); err != nil {
		in.fatal(err)
	}
	in.sigs = make(chan os.Signal, 32)
	signal.Notify(in.sigs, unix.SIGTERM, agent.SignalPowerOff, agent.SignalReboot)
	if err := in.setup(); err != nil {
		in.fatal(err)
	}
	in.release()
	in.supervise()
}

// setup runs the boot sequence up to the agent's start.
func (in *pid1) setup() error {
	os.Setenv("PATH", defaultPath)
	if err := mountEarly(); err != nil {
		return err
	}
	// The kernel's rootfs is 1777; tasks must not create top-level paths
	// that root uses later.
	if err := unix.Chmod("/", 0o755); err != nil {
		in.log.Warn("chmod /", "err", err)
	}
	if !stdioOpen() {
		in.openConsole()
	}

	cmdline, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return err
	}
	in.cmdline = string(cmdline)
	if in.cfg, err = api.ParseCmdline(in.cmdline); err != nil {
		return err
	}
	in.log = console.NewLogger(os.Stderr, "", in.cfg.Debug)
	in.log.Debug("boot config", "cmdline", strings.TrimSpace(string(cmdline)))

	in.harden()
	in.busyboxLinks()
	// Tasks need cgroups, so they are made before the agent is released; and
	// before the modules load, not beside them: made on the second CPU while
	// the first loads modules, they save nothing, and under TCG the guest
	// kernel can stall with init stuck on CPU 1 making a cgroup while CPU 0
	// loads modules (docs/performance.md, Figures behind the code).
	if err := setupCgroups("/sys/fs/cgroup"); err != nil {
		in.log.Warn("no task cgroups", "err", err)
	}
	// The console may be a module (virtio_console for hvc0 on Apple's
	// framework): open it again once modules loaded (only then: opening the
	// serial console costs boot time under TCG), and tell the host init runs
	// (api.InitRunning: exactly this line, whatever the log format).
	modules, late := SplitLate(in.readModules(ModulesList), in.cfg)
	if in.loadModules(modules) > 0 {
		in.openConsole()
	}
	fmt.Fprintln(os.Stderr, api.InitRunning)
	if in.cfg.Root == "" {
		// The agent starts here, after the modules (Debian's kernel),
		// held until the rest of setup (the workspace, the loopback) is
		// done: its transport then opens beside init's remaining steps,
		// on the other CPU. Not beside module loading: under TCG that
		// can stall the guest (see the cgroups above). Nor before the
		// hardening and the cgroups when there are no modules (the
		// kernel built from source): its start-up takes CPU time that
		// setup needs under TCG, and it is ready later that way
		// (docs/performance.md, What changed). With a root disk it
		// starts after the switch, in the new root (supervise).
		in.startAgent(true)
	}
	if err := loopbackUp(); err != nil {
		in.log.Warn("loopback", "err", err)
	}
	if err := unix.Sethostname([]byte(hostname)); err != nil {
		in.log.Warn("hostname", "err", err)
	}
	if in.cfg.Root != "" {
		if err := in.switchRoot(); err != nil {
			return err
		}
	}
	in.prepareHome()
	if in.cfg.Park {
		if err := in.awaitWake(); err != nil {
			return err
		}
		in.loadModules(late)
	}
	if in.cfg.Share != api.ShareNone {
		if err := mountWorkspace(in.log, in.cfg); err != nil {
			return err
		}
		in.workspace = true
		in.log.Debug("workspace mounted", "fs", in.cfg.Share, "read_only", in.cfg.ShareReadOnly)
	}
	return nil
}

// awaitWake waits, on a guest booted to park, until the agent's transport
// has the host's Wake, and applies it: everything before this is the same
// for every machine a host starts from a state saved while the guest
// waited (api.BootConfig.Park), everything after it is this machine's own.
// What the saved state shares and the Wake does not renew: the kernel's
// address layout, its stack canary and hash seeds, the boot id, and the
// generator of init's Go runtime (the multiplexer's nonces and the agent's
// instance, which only tell apart sessions and agents of one machine).
// Tasks start after it, as new programs, with their own layout and
// canaries from the reseeded generator.
func (in *pid1) awaitWake() error {
	var w *api.Wake
	select {
	case w = <-in.woken:
	case err := <-in.agentDone:
		return fmt.Errorf("the agent ended before the host woke the parked guest: %w", err)
	}
	// The saved state's generator would give every machine started from
	// it the same random numbers: mix in the host's bytes and reseed
	// before anything of this run draws from it. Without that this
	// machine must not run.
	if err := reseed(w.GetEntropy()); err != nil {
		return fmt.Errorf("reseed the kernel's generator after the wake: %w", err)
	}
	ts := unix.NsecToTimespec(w.GetUnixNanos())
	if err := unix.ClockSettime(unix.CLOCK_REALTIME, &ts); err != nil {
		in.log.Warn("clock after the wake", "err", err)
	}
	fmt.Fprintln(os.Stderr, api.Woken)
	return nil
}

// reseed credits entropy to the kernel's input pool (RNDADDENTROPY) and
// makes its generator reseed from the pool at once (RNDRESEEDCRNG), rather
// than at its next scheduled reseed: about a second away this early in a
// guest's life, up to a minute later on, and until then every machine of
// one template draws the same numbers (tests/e2e TestTemplates).
func reseed(entropy []byte) error {
	f, err := os.OpenFile("/dev/urandom", os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	// struct rand_pool_info: entropy_count (bits), buf_size (bytes), buf.
	info := make([]byte, 8+len(entropy))
	binary.NativeEndian.PutUint32(info[0:], uint32(8*len(entropy)))
	binary.NativeEndian.PutUint32(info[4:], uint32(len(entropy)))
	copy(info[8:], entropy)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.RNDADDENTROPY, uintptr(unsafe.Pointer(&info[0]))); errno != 0 {
		return fmt.Errorf("RNDADDENTROPY: %w", errno)
	}
	if err := unix.IoctlSetInt(int(f.Fd()), unix.RNDRESEEDCRNG, 0); err != nil {
		return fmt.Errorf("RNDRESEEDCRNG: %w", err)
	}
	return nil
}

// busyboxLinks makes busybox's applet links (/bin/sh, /usr/bin/env, ...)
// when the initramfs lacks them: the image builder writes them, unless its
// host could not run the guest's busybox. It runs before any chroot to a
// root disk, so the links land in the initramfs, like the builder's.
func (in *pid1) busyboxLinks() {
	if _, err := os.Lstat("/bin/sh"); !errors.Is(err, os.ErrNotExist) {
		return
	}
	in.log.Debug("no /bin/sh in the initramfs: busybox --install -s")
	if out, err := exec.Command("/bin/busybox", "--install", "-s").CombinedOutput(); err != nil {
		in.log.Warn("busybox --install", "err", err, "out", strings.TrimSpace(string(out)))
	}
}

// hardening are the kernel settings init makes before any task runs.
// Tasks share uid 1000, so without Yama's scope 1 one task could ptrace
// (read the memory of, inject into) another task's processes; scope 1
// still lets a task trace its own children (strace, gdb of a child).
var hardening = []struct{ path, value string }{
	{"/proc/sys/kernel/yama/ptrace_scope", "1"},
	{"/proc/sys/kernel/kptr_restrict", "2"},
	{"/proc/sys/kernel/dmesg_restrict", "1"},
	{"/proc/sys/kernel/unprivileged_bpf_disabled", "1"},
	{"/proc/sys/kernel/perf_event_paranoid", "3"},
}

// harden applies hardening; a setting the kernel lacks is logged, not
// fatal (the tests in tests/security say whether it held).
func (in *pid1) harden() {
	for _, h := range hardening {
		if err := os.WriteFile(h.path, []byte(h.value), 0); err != nil {
			in.log.Warn("hardening", "path", h.path, "err", err)
		}
	}
}

// stdioOpen reports whether init has its stdio: the kernel opens
// /dev/console for it before init runs when the initramfs has the node
// (Airlock's images do). Opening the serial console again costs boot time
// under TCG.
func stdioOpen() bool {
	for fd := range 3 {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil {
			return false
		}
	}
	return true
}

// openConsole makes /dev/console init's stdio: the kernel opens it before
// init runs only if the initramfs has the node.
func (in *pid1) openConsole() {
	f, err := os.OpenFile("/dev/console", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return
	}
	for fd := range 3 {
		_ = unix.Dup3(int(f.Fd()), fd, 0)
	}
	if f.Fd() > 2 {
		f.Close()
	}
}

// readModules returns the modules the image's list names. A kernel with
// every driver built in (airlock-image -kernel source) has nothing to
// load: its image ships a list of none, or no list.
func (in *pid1) readModules(list string) []string {
	f, err := os.Open(list)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			in.log.Debug("no module list: nothing to load", "path", list)
		} else {
			in.log.Warn("module list", "err", err)
		}
		return nil
	}
	paths, problems, err := ParseModules(f)
	f.Close()
	for _, p := range problems {
		in.log.Warn("module list", "problem", p)
	}
	if err != nil {
		in.log.Error("module list", "err", err)
	}
	return paths
}

// loadModules loads those of paths this boot needs, and says how many.
func (in *pid1) loadModules(paths []string) (loaded int) {
	for _, p := range paths {
		if !ModuleNeeded(p, in.cfg) {
			in.log.Debug("module not needed by this boot", "module", p)
			continue
		}
		if why := devices.Absent(ModuleName(p), in.cmdline); why != "" {
			in.log.Debug("module has no device in this VM", "module", p, "why", why)
			continue
		}
		if err := loadModule(p); err != nil {
			switch {
			case errors.Is(err, os.ErrNotExist):
				in.log.Info("optional module missing", "module", p)
			case errors.Is(err, unix.ENODEV):
				in.log.Debug("module has no device here", "module", p)
			default:
				in.log.Warn("module", "module", p, "err", err)
			}
			continue
		}
		in.log.Debug("module loaded", "module", p)
		loaded++
	}
	return loaded
}

func loadModule(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	flags := 0
	if compressed(p) {
		flags = unix.MODULE_INIT_COMPRESSED_FILE
	}
	err = unix.FinitModule(int(f.Fd()), "", flags)
	if errors.Is(err, unix.EEXIST) {
		return nil
	}
	return err
}

// prepareHome makes sure the task user owns its home and is named in
// /etc/passwd and /etc/group, whatever uid the host chose (a Linux host
// passes its own, so that files in a 9p workspace are the task user's).
func (in *pid1) prepareHome() {
	if in.cfg.UID != api.DefaultUID || in.cfg.GID != api.DefaultGID {
		for file, group := range map[string]bool{"/etc/passwd": false, "/etc/group": true} {
			if b, err := os.ReadFile(file); err == nil {
				_ = os.WriteFile(file, []byte(setUserIDs(string(b), api.UserName, in.cfg.UID, in.cfg.GID, group)), 0o644)
			}
		}
	}
	if err := os.MkdirAll(api.UserHome, 0o755); err != nil {
		in.log.Warn("home", "err", err)
		return
	}
	if err := os.Chown(api.UserHome, int(in.cfg.UID), int(in.cfg.GID)); err != nil {
		in.log.Warn("home", "err", err)
	}
}

// release lets an agent started during setup go on: setup is done.
func (in *pid1) release() {
	if in.hold != nil {
		close(in.hold)
		in.hold = nil
	}
}

// supervise starts the agent unless setup did, reaps every child, runs
// the agent again when it returns, and powers off when asked. It never
// returns.
func (in *pid1) supervise() {
	go in.reapLoop()
	restart := make(chan struct{}, 1)
	if !in.agentOn {
		in.startAgent(false)
	}
	for {
		select {
		case <-restart:
			in.startAgent(false)
		case err := <-in.agentDone:
			in.agentOn = false
			in.agentStop()
			in.log.Warn("agent stopped", "err", err)
			in.agentStopped(restart)
		case sig := <-in.sigs:
			switch sig {
			case unix.SIGTERM, agent.SignalPowerOff:
				in.powerOff(false)
			case agent.SignalReboot:
				in.powerOff(true)
			}
		}
	}
}

// agentStopped runs the agent again after a pause that grows with quick
// failures in a row, and gives up after maxQuickFails of them.
func (in *pid1) agentStopped(restart chan<- struct{}) {
	if time.Since(in.agentStart) < quickFail {
		in.quickFails++
	} else {
		in.quickFails = 0
	}
	if in.quickFails >= maxQuickFails {
		in.fatal(fmt.Errorf("the agent failed %d times in a row", in.quickFails))
	}
	delay := time.Duration(in.quickFails) * 500 * time.Millisecond
	time.AfterFunc(delay, func() { restart <- struct{}{} })
}

// startAgent runs the agent in a goroutine of PID 1. A held agent waits,
// before its proxies and its readiness, until release.
func (in *pid1) startAgent(held bool) {
	opts := agent.Options{Reaper: in, Boot: in.cfg}
	if held {
		in.hold = make(chan struct{})
		opts.Hold = in.hold
		if in.cfg.Park {
			opts.Park = func(w *api.Wake) { in.woken <- w }
		}
	}
	ctx, stop := context.WithCancel(context.Background())
	in.agentOn, in.agentStart, in.agentStop = true, time.Now(), stop
	log := console.NewLogger(os.Stderr, "agent", in.cfg.Debug)
	in.log.Debug("agent started", "held", held)
	go func() { in.agentDone <- in.run(ctx, log, opts) }()
}

// Spawn implements agent.Reaper: start forks a child, under reapMu, so
// that reapLoop cannot reap it before it is registered.
func (in *pid1) Spawn(start func() (int, error)) (<-chan syscall.WaitStatus, error) {
	in.reapMu.Lock()
	defer in.reapMu.Unlock()
	pid, err := start()
	if err != nil {
		return nil, err
	}
	ch := make(chan syscall.WaitStatus, 1)
	in.waiting[pid] = ch
	select {
	case in.spawned <- struct{}{}:
	default:
	}
	return ch, nil
}

// reapLoop reaps every child of PID 1 as it exits: the agent's tasks
// (their status goes to Spawn's channel) and whatever they orphaned. It
// waits without reaping (WNOWAIT), then reaps under reapMu, so a child
// forked by Spawn is registered before it can be reaped.
func (in *pid1) reapLoop() {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOWAIT, nil)
		switch {
		case err == unix.EINTR:
		case err == unix.ECHILD:
			<-in.spawned // no children: wait for one
		case err != nil:
			in.log.Error("waitid", "err", err)
			time.Sleep(100 * time.Millisecond)
		default:
			in.reap()
		}
	}
}

// reap collects every exited child.
func (in *pid1) reap() {
	in.reapMu.Lock()
	defer in.reapMu.Unlock()
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if err == unix.EINTR {
			continue
		}
		if pid <= 0 || err != nil {
			return
		}
		if ch, ok := in.waiting[pid]; ok {
			delete(in.waiting, pid)
			ch <- syscall.WaitStatus(ws)
		}
	}
}

// fatal reports err on the console and powers off: the host sees the VM
// end and the reason in the console log, never a silent hang.
func (in *pid1) fatal(err error) {
	in.log.Error("fatal: powering off", "err", err)
	in.powerOff(false)
}

// powerOff ends every process, syncs, unmounts the workspace and powers
// off (or reboots). It does not return.
func (in *pid1) powerOff(reboot bool) {
	signal.Reset()
	in.log.Info("shutting down", "reboot", reboot, "uptime", time.Since(in.boot).Round(time.Millisecond).String())
	if in.agentStop != nil {
		in.agentStop() // its transport and tasks end with the kill below
	}
	unix.Sync()
	_ = unix.Kill(-1, unix.SIGTERM)
	reapUntil(time.Now().Add(2 * time.Second))
	_ = unix.Kill(-1, unix.SIGKILL)
	reapUntil(time.Now().Add(time.Second))
	unix.Sync()
	if in.workspace {
		if err := unmountWorkspace(in.cfg); err != nil {
			in.log.Warn("unmount workspace", "err", err)
		}
	}
	unix.Sync()
	cmd := unix.LINUX_REBOOT_CMD_POWER_OFF
	if reboot {
		cmd = unix.LINUX_REBOOT_CMD_RESTART
	}
	err := unix.Reboot(cmd)
	// Only reachable if reboot(2) failed; PID 1 exiting panics the kernel,
	// which with panic=-1 also ends the VM.
	in.log.Error("reboot(2) failed", "err", err)
	os.Exit(1)
}

// reapUntil reaps children until none is left or the deadline passes.
func reapUntil(deadline time.Time) {
	for time.Now().Before(deadline) {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if errors.Is(err, unix.ECHILD) {
			return
		}
		if pid <= 0 {
			// Short: the agent, told to stop, usually exits within a
			// few ms, and every boot's power-off waits here.
			time.Sleep(2 * time.Millisecond)
		}
	}
}
