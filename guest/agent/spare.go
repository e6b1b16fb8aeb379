//go:build linux

package agent

import (
	"os"
	"os/exec"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// A spare task init is started ahead of the task it will run (see
// TaskInitArg): a fresh process of the guest binary is slow under emulation
// to start its runtime (docs/performance.md, Figures behind the code), which
// a task would otherwise wait for on top of its own start. The agent keeps
// one: started once it serves tasks, and again after each task that took the
// last has ended. A spare's mount namespace is a copy of the guest's from
// when it started, so a spare is discarded if the guest's mounts changed
// since (a root task mounted something).

// spareInit is a started spare task init.
type spareInit struct {
	cmd    *exec.Cmd
	exited <-chan syscall.WaitStatus // from Config.Reaper; nil: cmd.Process.Wait
	ctl    *os.File                  // the agent's end of its socket
	cg     *cgroup                   // nil without cgroups
}

// spares holds the Server's spare task init.
type spares struct {
	mu       sync.Mutex
	ready    *spareInit
	starting bool
	stopped  bool
	changed  sync.Cond // starting became false
	// mounts is the guest's mount table, polled for changes (POLLPRI)
	// since the spare started; 0 before the first spare (fd 0 is stdio,
	// never this), -1 if it cannot be opened. A raw fd: the
	// netpoller's epoll would take the change event first.
	mounts int
}

// takeSpare returns the spare task init, waiting for one being started,
// or nil when there is none. The next is started once the task is over
// (Exec): started at once, its start-up would take the guest's CPU from
// the task that took the last.
func (s *Server) takeSpare() *spareInit {
	if s.cfg.TaskInit == "" {
		return nil
	}
	sp := &s.spares
	sp.mu.Lock()
	for sp.starting {
		sp.changed.Wait()
	}
	si := sp.ready
	sp.ready = nil
	stale := si != nil && sp.mountsChanged()
	sp.mu.Unlock()
	if stale {
		s.discardSpare(si)
		si = nil
	}
	return si
}

// mountsChanged says whether the guest's mount table changed since it was
// last asked. Called with mu held.
func (sp *spares) mountsChanged() bool {
	if sp.mounts < 0 {
		return false
	}
	fds := []unix.PollFd{{Fd: int32(sp.mounts), Events: unix.POLLPRI}}
	n, err := unix.Poll(fds, 0)
	return err != nil || (n > 0 && fds[0].Revents&(unix.POLLPRI|unix.POLLERR) != 0)
}

// refillSpare starts a spare task init unless there is one.
func (s *Server) refillSpare() {
	if s.cfg.TaskInit == "" {
		return
	}
	sp := &s.spares
	sp.mu.Lock()
	if sp.ready != nil || sp.starting || sp.stopped {
		sp.mu.Unlock()
		return
	}
	sp.starting = true
	if sp.mounts == 0 {
		sp.mounts = -1
		if fd, err := unix.Open(s.cfg.ProcDir+"/self/mounts", unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
			sp.mounts = fd
		}
	}
	sp.mountsChanged() // from now on
	sp.mu.Unlock()

	si, err := s.startSpare()
	if err != nil {
		s.log.Warn("spare task init", "err", err)
	}
	sp.mu.Lock()
	sp.starting = false
	if sp.stopped && si != nil {
		defer s.discardSpare(si)
		si = nil
	}
	sp.ready = si
	sp.changed.Broadcast()
	sp.mu.Unlock()
}

// startSpare starts a spare task init in new PID and mount namespaces and
// its own cgroup, its socket on fd 3.
func (s *Server) startSpare() (_ *spareInit, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("socketpair", err)
	}
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, os.NewSyscallError("setnonblock", err)
	}
	si := &spareInit{ctl: os.NewFile(uintptr(fds[0]), "spare")}
	theirs := os.NewFile(uintptr(fds[1]), "spare")
	defer theirs.Close()
	defer func() {
		if err != nil {
			si.ctl.Close()
			if si.cg != nil {
				_ = si.cg.remove()
			}
		}
	}()
	null, err := s.devNull()
	if err != nil {
		return nil, err
	}
	// One P: the init waits and forks, and every thread its runtime
	// starts costs the guest's CPU while another task runs.
	cmd := &exec.Cmd{Path: s.cfg.TaskInit, Args: []string{"airlock-task-init", TaskInitArg, spareArg, s.rulesWorkspace(), toolNamesArg(s.cfg.RefuseToolNames)}, Env: []string{"GOMAXPROCS=1"}, Dir: "/",
		Stdin: null, Stdout: null, Stderr: null, ExtraFiles: []*os.File{theirs}}
	attr := &syscall.SysProcAttr{Cloneflags: taskNamespaces, Setsid: true}
	if s.cgroups != nil {
		if cg, cerr := s.cgroups.create(); cerr != nil {
			s.log.Warn("task without cgroup", "err", cerr)
		} else {
			si.cg = cg
			attr.UseCgroupFD, attr.CgroupFD = true, cg.fd
		}
	}
	cmd.SysProcAttr = attr
	// It restricts itself once its /proc is mounted (taskInit).
	bare := taskRules{ruleset: -1}
	if s.cfg.Reaper == nil {
		err = startNoNewPrivs(cmd, bare)
	} else {
		si.exited, err = s.cfg.Reaper.Spawn(func() (int, error) {
			if err := startNoNewPrivs(cmd, bare); err != nil {
				return 0, err
			}
			return cmd.Process.Pid, nil
		})
	}
	if err != nil {
		return nil, err
	}
	si.cmd = cmd
	return si, nil
}

// discardSpare ends an unused spare task init and frees its cgroup.
func (s *Server) discardSpare(si *spareInit) {
	_ = si.cmd.Process.Kill() // by pidfd: never another process
	si.ctl.Close()
	p := &process{cmd: si.cmd, exited: si.exited}
	_, _ = p.waitProcess()
	if si.cg != nil {
		if err := s.cgroups.release(si.cg); err != nil {
			s.log.Warn("spare task init cgroup", "err", err)
		}
	}
}

// stopSpares discards the spare and starts no more.
func (s *Server) stopSpares() {
	sp := &s.spares
	sp.mu.Lock()
	sp.stopped = true
	for sp.starting {
		sp.changed.Wait()
	}
	si := sp.ready
	sp.ready = nil
	if sp.mounts > 0 {
		unix.Close(sp.mounts)
		sp.mounts = -1
	}
	sp.mu.Unlock()
	if si != nil {
		s.discardSpare(si)
	}
}
