//go:build linux

package agent

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"

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
// again (12-25 ms of the boot's critical path under TCG). The calling
// thread having it shows that only because nothing sets it on one thread
// before the first call (start does, for tasks, after it).
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
	if !sp.root {
		// Groups empty (not nil) clears the supplementary groups.
		attr.Credential = &syscall.Credential{Uid: s.cfg.UID, Gid: s.cfg.GID, Groups: []uint32{}}
	}
	if s.cgroups != nil {
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
		attr.Setsid, attr.Setctty, attr.Ctty = true, true, 0
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

	s.guardToolConfig()
	rules, err := s.rules()
	if err != nil {
		return nil, err
	}
	if s.cfg.Reaper == nil {
		err = startNoNewPrivs(cmd, rules)
	} else {
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
	return p, nil
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

// wait waits for the task's main process to exit.
func (p *process) wait() (syscall.WaitStatus, error) {
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
