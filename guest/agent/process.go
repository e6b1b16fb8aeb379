//go:build linux

package agent

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"

	agentv1 "github.com/airlock-sandbox/airlock/guest/api/agent/v1"
	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// RestrictPrivileges sets no_new_privs on every thread of the agent, so no
// task can gain privileges through setuid binaries or file capabilities.
// Without cgo the Go runtime applies it to all threads; with cgo (tests) it
// is applied per spawn in start, which is what the tasks inherit.
//
// In the guest, init calls it first thing in PID 1 (guest/boot), while the
// runtime has few threads, and every thread made since copies the flag;
// agent.Run's own call then only checks, instead of stopping every thread
// again on the boot's critical path (docs/performance.md, Figures behind the
// code). The calling thread having it shows that only because nothing sets it
// on one thread before the first call (start does, for tasks, after it).
func RestrictPrivileges() error {
	if v, err := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0); err == nil && v == 1 {
		return nil
	}
	_, _, errno := syscall.AllThreadsSyscall(syscall.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0)
	if errno == 0 {
		return nil
	}
	if errno != syscall.ENOTSUP {
		return fmt.Errorf("agent: prctl(PR_SET_NO_NEW_PRIVS): %w", errno)
	}
	return unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
}

// process is a started task: its main process and the parent's ends of its
// stdio.
type process struct {
	cmd    *exec.Cmd
	exited <-chan syscall.WaitStatus // from Config.Reaper; nil: cmd.Process.Wait
	pgid   int
	cg     *cgroup  // nil without cgroups
	stdin  *os.File // write end; nil when stdin is /dev/null
	stdout *os.File // read end; the PTY master with a terminal
	stderr *os.File // read end; nil with a terminal
	pty    *os.File // the PTY master, for resizes; nil without a terminal
	// report is the read end of the task init's report pipe (see
	// TaskInitArg); nil when the task runs without one (root tasks, or
	// Config.TaskInit unset). cmd is then the init, and initLeft says
	// that its own exit is still to be collected.
	report   *os.File
	initGone chan struct{} // closed once the init has been collected
}

// start starts sp in its own process group (or session), in its own cgroup.
// On error nothing is left behind.
func (s *Server) start(sp *spec) (_ *process, err error) {
	p := &process{}
	var closeOnErr, childEnds []*os.File
	defer func() {
		for _, f := range childEnds {
			f.Close()
		}
		if err != nil {
			for _, f := range closeOnErr {
				f.Close()
			}
			if p.cg != nil {
				_ = p.cg.remove()
			}
		}
	}()

	cmd := &exec.Cmd{Path: sp.path, Args: sp.argv, Env: sp.env, Dir: sp.dir}
	attr := &syscall.SysProcAttr{}
	isolated := s.cfg.TaskInit != "" && !sp.root
	// Before a spare is taken: a spare whose mount namespace predates
	// the read-only binds this makes is then stale (takeSpare discards
	// it), and its task would not see them.
	s.guardToolConfig()
	var spare *spareInit
	if isolated {
		spare = s.takeSpare()
	}
	switch {
	case spare != nil:
		// A spare task init, started ahead, gets the task over its
		// socket (see spareInit), which it then reports on.
		p.cg, p.report = spare.cg, spare.ctl
		closeOnErr = append(closeOnErr, spare.ctl)
	case isolated:
		// The task's init, in namespaces of its own, starts it
		// (see TaskInitArg) and reports on its fd 3.
		args := taskInitArgs("airlock-task-init", sp.tty, s.cfg.UID, s.cfg.GID, s.rulesWorkspace(), toolNamesArg(s.cfg.RefuseToolNames), sp.dir, sp.path, sp.argv)
		cmd = &exec.Cmd{Path: s.cfg.TaskInit, Args: args, Env: sp.env, Dir: "/"}
		attr.Cloneflags = taskNamespaces
		r, w, perr := outputPipe()
		if perr != nil {
			return nil, perr
		}
		childEnds = append(childEnds, w)
		closeOnErr = append(closeOnErr, r)
		cmd.ExtraFiles, p.report = []*os.File{w}, r
	case !sp.root:
		// Groups empty (not nil) clears the supplementary groups.
		attr.Credential = &syscall.Credential{Uid: s.cfg.UID, Gid: s.cfg.GID, Groups: []uint32{}}
	}
	if s.cgroups != nil && spare == nil {
		cg, cerr := s.cgroups.create()
		if cerr != nil {
			s.log.Warn("task without cgroup", "err", cerr)
		} else {
			p.cg, cg.private = cg, sp.root
			attr.UseCgroupFD, attr.CgroupFD = true, cg.fd
		}
	}

	if sp.tty {
		ptmx, tty, perr := pty.Open()
		if perr != nil {
			return nil, fmt.Errorf("open pty: %w", perr)
		}
		closeOnErr = append(closeOnErr, ptmx)
		childEnds = append(childEnds, tty)
		if err := pty.Setsize(ptmx, &pty.Winsize{Rows: sp.rows, Cols: sp.cols}); err != nil {
			return nil, fmt.Errorf("pty size: %w", err)
		}
		if !sp.root {
			// Programs that reopen their terminal by name need to own it.
			_ = os.Chown(tty.Name(), int(s.cfg.UID), int(s.cfg.GID))
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
		// A task init leads a session without a terminal: the task
		// takes the terminal in a session of its own.
		attr.Setsid, attr.Setctty, attr.Ctty = true, !isolated, 0
		p.pty, p.stdout = ptmx, ptmx
		if sp.stdin {
			p.stdin = ptmx
		}
	} else {
		attr.Setpgid = true
		if sp.stdin {
			r, w, perr := os.Pipe()
			if perr != nil {
				return nil, perr
			}
			childEnds = append(childEnds, r)
			closeOnErr = append(closeOnErr, w)
			cmd.Stdin, p.stdin = r, w
		} else {
			null, nerr := s.devNull()
			if nerr != nil {
				return nil, nerr
			}
			cmd.Stdin = null // shared, never closed
		}
		var ws [2]*os.File
		for i, out := range []**os.File{&p.stdout, &p.stderr} {
			r, w, perr := outputPipe()
			if perr != nil {
				return nil, perr
			}
			childEnds = append(childEnds, w)
			closeOnErr = append(closeOnErr, r)
			*out, ws[i] = r, w
		}
		cmd.Stdout, cmd.Stderr = ws[0], ws[1]
	}
	cmd.SysProcAttr = attr

	rules, err := s.rules()
	if err != nil {
		return nil, err
	}
	if sp.root {
		rules = rules.forRoot()
	}
	if isolated {
		// A task init mounts its /proc, which Landlock forbids to a
		// restricted thread: it restricts itself (and serves the
		// filter's calls) after that, the agent's thread only gets
		// no_new_privs.
		rules = taskRules{ruleset: -1}
	}
	switch {
	case spare != nil:
		t := initTask{tty: sp.tty, uid: s.cfg.UID, gid: s.cfg.GID, dir: sp.dir, path: sp.path, argv: sp.argv, env: sp.env,
			stdin: cmd.Stdin.(*os.File), stdout: cmd.Stdout.(*os.File), stderr: cmd.Stderr.(*os.File)}
		if err = sendTask(spare.ctl, t); err != nil {
			p.cg = nil
			s.discardSpare(spare)
			return nil, fmt.Errorf("send the task to its init: %w", err)
		}
		cmd, p.exited = spare.cmd, spare.exited
	case s.cfg.Reaper == nil:
		err = startNoNewPrivs(cmd, rules)
	default:
		p.exited, err = s.cfg.Reaper.Spawn(func() (int, error) {
			if err := startNoNewPrivs(cmd, rules); err != nil {
				return 0, err
			}
			return cmd.Process.Pid, nil
		})
	}
	if err != nil {
		return nil, err
	}
	p.cmd = cmd
	p.pgid = cmd.Process.Pid // leader of its new group or session
	if p.report != nil {
		// The init and the task hold the only write ends now.
		for _, f := range childEnds {
			f.Close()
		}
		childEnds = nil
		if err := p.started(); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// started waits for the task init to say whether the task started. On
// failure the init has been collected when it returns, so its cgroup can go.
func (p *process) started() error {
	_ = p.report.SetReadDeadline(time.Now().Add(initStartTimeout))
	kind, value, err := initReport(p.report)
	_ = p.report.SetReadDeadline(time.Time{})
	if err == nil && kind == initStarted {
		return nil
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// Wedged, and still holding its end of the pipe, so not yet
		// reaped: its pid is still its own.
		_ = unix.Kill(p.pgid, unix.SIGKILL)
	}
	ws, _ := p.waitProcess()
	switch {
	case err == nil && kind == initStartFail:
		return syscall.Errno(value)
	case err == nil && kind == initSetupFail:
		return agentv1.Errorf(agentv1.Code_INTERNAL, "exec: the task's init cannot set up its namespaces: %v", syscall.Errno(value))
	case err == nil:
		return agentv1.Errorf(agentv1.Code_INTERNAL, "exec: the task's init sent report %d before the task started", kind)
	default:
		return agentv1.Errorf(agentv1.Code_INTERNAL, "exec: the task's init ended without starting the task (wait status %#x): %v", uint32(ws), err)
	}
}

// outputPipe makes a pipe for a task's output: the read end non-blocking in
// the netpoller (so closing it stops a reader), the task's end blocking and
// kept out of the netpoller. os.Pipe would register both ends and switch
// them back and forth, a dozen syscalls where six do; each costs the task
// tens of microseconds under emulation.
func outputPipe() (r, w *os.File, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil, nil, os.NewSyscallError("pipe2", err)
	}
	if _, err := unix.FcntlInt(uintptr(p[1]), unix.F_SETFL, 0); err != nil {
		unix.Close(p[0])
		unix.Close(p[1])
		return nil, nil, os.NewSyscallError("fcntl", err)
	}
	return os.NewFile(uintptr(p[0]), "|0"), os.NewFile(uintptr(p[1]), "|1"), nil
}

// growPipe enlarges a pipe to pipeSize, so a task writing big blocks
// blocks less and its output is read in fewer, larger reads. It is done
// when a task turns out to write much, not for every task. Failing is
// harmless: the pipe keeps its default size.
func growPipe(f *os.File) {
	if rc, err := f.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { _, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, pipeSize) })
	}
}

// startNoNewPrivs starts cmd from a thread that has no_new_privs set and
// the tasks' restrictions (restrictTask): the child is cloned from that
// thread and inherits them. The thread stays locked to a goroutine that
// then ends, which ends the thread: nothing else ever runs restricted.
func startNoNewPrivs(cmd *exec.Cmd, rules taskRules) error {
	errc := make(chan error, 1)
	go restrictedStart(cmd, rules, errc)
	err := <-errc
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// restrictedStart is startNoNewPrivs's goroutine.
func restrictedStart(cmd *exec.Cmd, rules taskRules, errc chan<- error) {
	runtime.LockOSThread()
	if unix.Gettid() == unix.Getpid() {
		// The main thread is wedged, not ended, when a goroutine locked to
		// it exits: it would keep the filter, and its listener (symlink.go)
		// would never see the task end. Restrict another thread; this one
		// stays locked meanwhile, so the new goroutine cannot land on it.
		done := make(chan struct{})
		go func() {
			restrictedStart(cmd, rules, errc)
			close(done)
		}()
		<-done
		runtime.UnlockOSThread()
		return
	}
	listener, err := restrictTask(rules)
	if err == nil {
		err = cmd.Start()
	}
	if listener >= 0 {
		if err == nil {
			go serveCalls(listener, rules.ws)
		} else {
			unix.Close(listener)
		}
	}
	errc <- err
}

// wait waits for the task's main process to exit. With a task init that
// is what the init reports; the init itself stays until what the task left
// behind is gone, and collectInit collects it.
func (p *process) wait() (syscall.WaitStatus, error) {
	if p.report != nil {
		if kind, value, err := initReport(p.report); err == nil && kind == initExited {
			p.initGone = make(chan struct{})
			go func() {
				_, _ = p.waitProcess()
				close(p.initGone)
			}()
			return syscall.WaitStatus(value), nil
		}
		// No report: the init was killed, and the task with it.
	}
	return p.waitProcess()
}

// initExitGrace bounds the wait for a task init to end on its own once its
// task's output is drained: it ends as soon as nothing is left in its
// namespace, and then its cgroup is empty and serves the next task, where
// killing it would cost a new cgroup. Beyond it, what is left is killed.
const initExitGrace = 50 * time.Millisecond

// awaitInit waits, up to d, for a task init whose task has ended to end.
func (p *process) awaitInit(d time.Duration) {
	if p.initGone == nil {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.initGone:
	case <-t.C:
	}
}

// collectInit waits for a task init whose task has ended: killTree has
// killed it if nothing else ended it.
func (p *process) collectInit() {
	if p.initGone != nil {
		<-p.initGone
	}
	if p.report != nil {
		p.report.Close()
	}
}

// waitProcess waits for cmd's process to exit.
func (p *process) waitProcess() (syscall.WaitStatus, error) {
	if p.exited == nil {
		st, err := p.cmd.Process.Wait()
		if err != nil {
			return 0, err
		}
		return st.Sys().(syscall.WaitStatus), nil
	}
	ws := <-p.exited
	p.cmd.Process.Release() // reaped by the Reaper: only its handle is left
	return ws, nil
}

// signalGroup sends sig to the task's process group.
func (p *process) signalGroup(sig syscall.Signal) {
	_ = unix.Kill(-p.pgid, sig)
}

// killTree kills everything the task started: the whole cgroup, and the
// process group as well (the only handle without cgroups).
func (p *process) killTree() {
	// An empty cgroup stays empty (only the agent clones into it), and one
	// never killed can serve the next task (see cgroup.killed).
	if p.cg != nil && !p.cg.empty() {
		_ = p.cg.kill()
	}
	_ = unix.Kill(-p.pgid, unix.SIGKILL)
}
