//go:build linux

package agent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	ossignal "os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// TaskInitArg, as argv[1], makes the guest binary a task's init
// (RunTaskInit) instead of the guest's.
//
// Every task not run as root gets a PID namespace and a mount namespace of
// its own, with its own /proc: tasks share one uid (the workspace's files
// must stay theirs), so neither hidepid nor Yama keeps one task from
// reading another's /proc/PID/environ (its proxy credential), listing its
// open files or signalling it; a task cannot name a process outside its
// namespace. procfs shows the PID namespace of the process that mounts it,
// so the mount has to be made from inside: the agent starts the guest
// binary again (Config.TaskInit) as the namespace's PID 1, which mounts
// /proc, starts the task with its credentials and stdio, reaps what the
// task orphans, and tells the agent how the task started and ended over a
// pipe (its fd 3).
//
// Each such task also has its own IPC namespace and /dev/shm (a tmpfs of
// its own, gone with the task), so that one task cannot read or change
// another's shared memory, semaphores or message queues. /tmp and the
// loopback network stay shared: tasks are the commands of one session,
// and a server one task starts is what another task's client talks to.
//
// Root tasks keep the guest's namespaces: root can undo any of it, and an
// administrator's root task is where the whole guest is looked at (ps,
// kill).
const TaskInitArg = "task-init"

// taskNamespaces are the namespaces a task init starts in.
const taskNamespaces = unix.CLONE_NEWPID | unix.CLONE_NEWNS | unix.CLONE_NEWIPC

// The task init's reports on its fd 3, 8 bytes each (a pipe writes them
// whole): a kind and a value.
const (
	initStarted   = 1 // the task runs; value: its pid in the namespace
	initStartFail = 2 // the task did not start; value: the errno
	initExited    = 3 // the task's main process ended; value: its wait status
	initSetupFail = 4 // the init could not set the namespace up; value: the errno
)

// initStartTimeout bounds how long the agent waits for a task init to say
// whether the task started: the init is a fresh process of the guest
// binary, which starts in milliseconds even under emulation.
const initStartTimeout = 30 * time.Second

// initSignals are the signals a task init passes on to its task (with a
// terminal; without one the task shares the init's process group and gets
// them from the agent directly). It must handle them either way: Go's
// runtime handlers would otherwise make it exit.
var initSignals = []os.Signal{
	unix.SIGHUP, unix.SIGINT, unix.SIGQUIT, unix.SIGTERM, unix.SIGUSR1, unix.SIGUSR2,
	unix.SIGALRM, unix.SIGCONT, unix.SIGTSTP, unix.SIGTTIN, unix.SIGTTOU, unix.SIGWINCH,
	unix.SIGPIPE, unix.SIGVTALRM, unix.SIGPROF, unix.SIGXCPU, unix.SIGXFSZ, unix.SIGPWR,
	unix.SIGSYS, unix.SIGTRAP, unix.SIGABRT,
}

// taskInitArgs is the init's command line after TaskInitArg: mode ("t"
// with a terminal, "p" without), uid, gid, the workspace whose rules
// restrict the task (restrict.go; "" for none), whether they refuse the
// tool configuration's names there (toolNamesArg), working directory,
// executable, then the task's argv. Its environment is the task's.
func taskInitArgs(self string, tty bool, uid, gid uint32, ws, names, dir, path string, argv []string) []string {
	mode := "p"
	if tty {
		mode = "t"
	}
	args := []string{self, TaskInitArg, mode, strconv.FormatUint(uint64(uid), 10), strconv.FormatUint(uint64(gid), 10), ws, names, dir, path}
	return append(args, argv...)
}

// toolNamesArg is RefuseToolNames on a task init's command line.
func toolNamesArg(refuse bool) string {
	if refuse {
		return "names"
	}
	return "-"
}

// rulesWorkspace is the workspace the tasks' rules guard (buildRules): ""
// when none is mounted.
func (s *Server) rulesWorkspace() string {
	if s.workspaceMounted() {
		return s.cfg.WorkspaceDir
	}
	return ""
}

// initRules builds, in a task init, the rules the agent built for its
// tasks (buildRules), for the workspace ws; names is toolNamesArg's.
func initRules(ws, names string) (taskRules, error) {
	r, _, err := newTaskRules(ws, names == toolNamesArg(true))
	if err != nil && auditArch == 0 {
		return r, nil // as buildRules: no filter for this architecture
	}
	return r, err
}

// RunTaskInit is a task's init (see TaskInitArg): the guest binary runs it
// when started with TaskInitArg. It never returns.
func RunTaskInit() {
	os.Exit(taskInit(os.Args[2:]))
}

// initTask is what a task init starts.
type initTask struct {
	tty                   bool
	uid, gid              uint32
	dir, path             string
	argv, env             []string
	stdin, stdout, stderr *os.File
}

func taskInit(args []string) int {
	// fd 3 is the report pipe (or, for a spare, socket); nothing the task
	// runs may inherit it.
	unix.CloseOnExec(3)
	report := os.NewFile(3, "report")
	send := func(kind, value uint32) {
		var b [8]byte
		binary.NativeEndian.PutUint32(b[:4], kind)
		binary.NativeEndian.PutUint32(b[4:], value)
		_, _ = report.Write(b[:])
	}
	failAs := func(kind uint32, err error) int {
		var errno syscall.Errno
		if !errors.As(err, &errno) {
			errno = unix.EINVAL
		}
		send(kind, uint32(errno))
		return 1
	}
	fail := func(err error) int { return failAs(initStartFail, err) }
	// Handled before anything else: as PID 1 of its namespace the init
	// gets only the signals it handles, and Go's default handling of
	// these would end it.
	sigs := make(chan os.Signal, 32)
	ossignal.Notify(sigs, initSignals...)

	if err := mountTaskProc(); err != nil {
		return failAs(initSetupFail, err)
	}

	var t initTask
	var rules taskRules
	if len(args) == 3 && args[0] == spareArg {
		// A spare: its rules are made ahead; the task comes over the
		// socket, stdio with it.
		var err error
		if rules, err = initRules(args[1], args[2]); err != nil {
			return failAs(initSetupFail, err)
		}
		if t, err = recvTask(report); err != nil {
			return failAs(initSetupFail, err)
		}
	} else {
		if len(args) < 8 {
			return failAs(initSetupFail, unix.EINVAL)
		}
		uid, err1 := strconv.ParseUint(args[1], 10, 32)
		gid, err2 := strconv.ParseUint(args[2], 10, 32)
		if err1 != nil || err2 != nil {
			return failAs(initSetupFail, unix.EINVAL)
		}
		var err error
		if rules, err = initRules(args[3], args[4]); err != nil {
			return failAs(initSetupFail, err)
		}
		t = initTask{tty: args[0] == "t", uid: uint32(uid), gid: uint32(gid), dir: args[5], path: args[6], argv: args[7:],
			env: os.Environ(), stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr}
	}
	tty, uid, gid := t.tty, t.uid, t.gid

	cmd := &exec.Cmd{Path: t.path, Args: t.argv, Env: t.env, Dir: t.dir,
		Stdin: t.stdin, Stdout: t.stdout, Stderr: t.stderr}
	// Groups empty (not nil) clears the supplementary groups.
	attr := &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}}
	if tty {
		// The task leads the terminal's session, so a Ctrl-C reaches its
		// foreground group, never the init.
		attr.Setsid, attr.Setctty, attr.Ctty = true, true, 0
	}
	cmd.SysProcAttr = attr
	// The mounts are done: the task is forked from a thread with the
	// tasks' restrictions (restrict.go), which forbid mount(2); the init
	// serves the filter's calls (symlink.go) while the task runs.
	errc := make(chan error, 1)
	restrictedStart(cmd, rules, errc)
	if err := <-errc; err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return fail(err)
	}
	pid := cmd.Process.Pid
	send(initStarted, uint32(pid))
	// The task's ends of its stdio belong to the task alone: the agent
	// reads its output until the last of them is closed.
	quietStdio()
	for _, f := range []*os.File{t.stdin, t.stdout, t.stderr} {
		if f.Fd() > 2 {
			f.Close()
		}
	}

	go func() {
		for sig := range sigs {
			if tty && sig != unix.SIGPIPE {
				_ = unix.Kill(-pid, sig.(syscall.Signal))
			}
		}
	}()
	// Reap the task and whatever it orphans; once nothing is left, the
	// init ends (its end would kill whatever was left in the namespace).
	for {
		var ws unix.WaitStatus
		wpid, err := unix.Wait4(-1, &ws, 0, nil)
		switch {
		case err == unix.EINTR:
		case err != nil:
			return 0
		case wpid == pid:
			send(initExited, uint32(ws))
		}
	}
}

// mountTaskProc gives the init's mount namespace a /proc of its PID
// namespace and a /dev/shm of its own. Mounts below / become slaves
// first, so these mounts never propagate to the guest's own namespace
// (and hide the agent's /proc there).
func mountTaskProc() error {
	if err := unix.Mount("", "/", "", unix.MS_SLAVE|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("make / a slave mount: %w", err)
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	// POSIX shared memory lives in /dev/shm: a tmpfs of the task's own,
	// as its SysV IPC is its IPC namespace's.
	if err := unix.Mount("tmpfs", "/dev/shm", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777"); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("mount /dev/shm: %w", err)
	}
	return nil
}

// quietStdio points the init's stdio at /dev/null.
func quietStdio() {
	fd, err := unix.Open(os.DevNull, unix.O_RDWR, 0)
	if err != nil {
		for i := range 3 {
			unix.Close(i)
		}
		return
	}
	for i := range 3 {
		if i != fd {
			_ = unix.Dup3(fd, i, 0)
		}
	}
	if fd > 2 {
		unix.Close(fd)
	}
}

// initReport reads one report from a task init's pipe r. An error is
// io.EOF (or io.ErrUnexpectedEOF) when the init ended without one, as only
// the init holds the pipe's write end, or the read's own error.
func initReport(r io.Reader) (kind, value uint32, err error) {
	var b [8]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return 0, 0, err
	}
	return binary.NativeEndian.Uint32(b[:4]), binary.NativeEndian.Uint32(b[4:]), nil
}

// spareArg, after TaskInitArg, starts a spare task init: it sets up its
// namespaces at once and then waits on its socket (fd 3) for its task
// (sendTask), so that the task does not wait for a process of the guest
// binary to start (see Server.takeSpare).
const spareArg = "spare"

// maxTaskMsg bounds a task sent to a spare: the spec's own limits on its
// arguments and environment, and room for the rest.
const maxTaskMsg = maxArgBytes + maxEnvBytes + 64<<10

// sendTask sends t to a spare init over the socket c: a 4-byte length, then
// fields separated by NUL bytes (mode, uid, gid, dir, path, the number of
// arguments, the arguments, the environment), with the task's stdio
// attached as SCM_RIGHTS to the first write.
func sendTask(c *os.File, t initTask) error {
	mode := "p"
	if t.tty {
		mode = "t"
	}
	fields := append([]string{mode, strconv.FormatUint(uint64(t.uid), 10), strconv.FormatUint(uint64(t.gid), 10), t.dir, t.path, strconv.Itoa(len(t.argv))}, t.argv...)
	fields = append(fields, t.env...)
	n := 0
	for _, f := range fields {
		n += len(f) + 1
	}
	msg := make([]byte, 4, 4+n)
	binary.NativeEndian.PutUint32(msg, uint32(n))
	for _, f := range fields {
		msg = append(append(msg, f...), 0)
	}
	rights := unix.UnixRights(int(t.stdin.Fd()), int(t.stdout.Fd()), int(t.stderr.Fd()))
	rc, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	sent := 0
	werr := rc.Write(func(fd uintptr) bool {
		var oob []byte
		if sent == 0 {
			oob = rights
		}
		w, err := unix.SendmsgN(int(fd), msg[sent:], oob, nil, 0)
		if err == unix.EAGAIN {
			return false
		}
		if err != nil {
			serr = err
			return true
		}
		sent += w
		return sent == len(msg)
	})
	if werr != nil {
		return werr
	}
	return serr
}

// recvTask receives a task from the socket c (sendTask).
func recvTask(c *os.File) (initTask, error) {
	var t initTask
	head := make([]byte, 4)
	oob := make([]byte, unix.CmsgSpace(3*4))
	n, oobn, _, _, err := unix.Recvmsg(int(c.Fd()), head, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return t, err
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return t, unix.EBADMSG
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 3 {
		return t, unix.EBADMSG
	}
	t.stdin, t.stdout, t.stderr = os.NewFile(uintptr(fds[0]), "stdin"), os.NewFile(uintptr(fds[1]), "stdout"), os.NewFile(uintptr(fds[2]), "stderr")
	if _, err := io.ReadFull(c, head[n:]); err != nil {
		return t, err
	}
	size := binary.NativeEndian.Uint32(head)
	if size > maxTaskMsg {
		return t, unix.EMSGSIZE
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(c, body); err != nil {
		return t, err
	}
	f := strings.Split(strings.TrimSuffix(string(body), "\x00"), "\x00")
	if len(f) < 6 {
		return t, unix.EBADMSG
	}
	uid, err1 := strconv.ParseUint(f[1], 10, 32)
	gid, err2 := strconv.ParseUint(f[2], 10, 32)
	nargs, err3 := strconv.Atoi(f[5])
	if err1 != nil || err2 != nil || err3 != nil || nargs < 1 || 6+nargs > len(f) {
		return t, unix.EBADMSG
	}
	t.tty, t.uid, t.gid, t.dir, t.path = f[0] == "t", uint32(uid), uint32(gid), f[3], f[4]
	t.argv, t.env = f[6:6+nargs], f[6+nargs:]
	return t, nil
}
