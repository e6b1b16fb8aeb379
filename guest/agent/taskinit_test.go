//go:build linux

package agent

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	agentv1 "github.com/airlock-sandbox/airlock/guest/api/agent/v1"
	"github.com/airlock-sandbox/airlock/guest/api/execwire"
)

// TestMain makes the test binary a task init when started as one, as the
// guest binary is (Config.TaskInit).
func TestMain(m *testing.M) {
	// The links' lock beside the tests', not in the host's /run: the
	// same path for the test and the task inits it starts.
	linkLockPath = filepath.Join(os.TempDir(), fmt.Sprintf("airlock-agent-test-%d", os.Geteuid()), "links.lock")
	if len(os.Args) > 1 && os.Args[1] == TaskInitArg {
		RunTaskInit()
	}
	os.Exit(m.Run())
}

// newIsolatedEnv is newEnv with every non-root task started by a task init
// in namespaces of its own, as in the guest.
func newIsolatedEnv(t *testing.T, opts ...func(*Config)) *env {
	t.Helper()
	requireRoot(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Unshare(0); err != nil {
		t.Skip(err)
	}
	return newEnv(t, append([]func(*Config){func(c *Config) { c.TaskInit = self }}, opts...)...)
}

// startVictim starts a task that keeps running with marker in its
// environment and an open file named after it, and returns its pid as the
// agent sees it (the outer pid of the task's main process) once it runs.
func startVictim(t *testing.T, e *env, marker string) int {
	t.Helper()
	ctx, cancel := context.WithCancel(testCtx(t))
	stream, err := e.exec(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); stream.Close() })
	start := &agentv1.ExecStart{Shell: "exec 7>" + filepath.Join(e.workspace, marker) + "; echo up; exec sleep 1000", Env: []string{"VICTIM_MARKER=" + marker}}
	if err := stream.Send(&agentv1.ExecRequest{Msg: &agentv1.ExecRequest_Start{Start: start}}); err != nil {
		t.Fatal(err)
	}
	var initPID int
	for {
		ev, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if s := ev.GetStarted(); s != nil {
			initPID = int(s.GetPid())
		}
		if ev.kind == execwire.KindStdout && strings.Contains(string(ev.data), "up") {
			break
		}
	}
	// The task is the init's only child (of whichever of its threads
	// forked it).
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		threads, _ := filepath.Glob("/proc/" + strconv.Itoa(initPID) + "/task/*/children")
		for _, th := range threads {
			b, _ := os.ReadFile(th)
			for _, f := range strings.Fields(string(b)) {
				pid, _ := strconv.Atoi(f)
				if env, _ := os.ReadFile("/proc/" + f + "/environ"); strings.Contains(string(env), marker) {
					return pid
				}
			}
		}
	}
	t.Fatalf("the victim's process under init %d not found", initPID)
	return 0
}

// TestTaskIsolation: a task cannot read another task's environment or
// open files, or signal it; it sees only its own processes.
func TestTaskIsolation(t *testing.T) {
	e := newIsolatedEnv(t)
	marker := "victim-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	victim := strconv.Itoa(startVictim(t, e, marker))

	attacks := []struct{ name, cmd string }{
		{"read its environment by pid", "cat /proc/" + victim + "/environ"},
		{"find its environment", "cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep " + marker},
		{"list its open files", "ls -l /proc/" + victim + "/fd"},
		{"find its open files", "ls -l /proc/[0-9]*/fd/ 2>/dev/null | grep " + marker},
		{"kill it", "kill -9 " + victim},
		{"stop it", "kill -STOP " + victim},
	}
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			r := mustRun(t, e, shell(a.cmd))
			if r.exit.Code == 0 || strings.Contains(r.stdout.String(), marker) {
				t.Errorf("%s: exit %v, stdout %q, stderr %q", a.cmd, r.exit, r.stdout.String(), r.stderr.String())
			}
		})
	}
	t.Run("sees only its own processes", func(t *testing.T) {
		// The init (PID 1), the shell, ls, and wc if it has started by
		// the time ls's glob is expanded; the init's threads take pids
		// from the namespace too, but are not processes.
		r := mustRun(t, e, shell("ls -d /proc/[0-9]* | wc -l; cat /proc/1/environ"))
		if got := lines(&r.stdout); len(got) != 1 || (got[0] != "3" && got[0] != "4") || !strings.Contains(r.stderr.String(), "denied") {
			t.Errorf("process count %q, want 3 or 4; the init's environment: %q", got, r.stderr.String())
		}
	})
	t.Run("victim survived", func(t *testing.T) {
		pid, _ := strconv.Atoi(victim)
		if !alive(pid) {
			t.Error("the victim is gone")
		}
	})
	t.Run("root keeps the guest's view", func(t *testing.T) {
		r := mustRun(t, e, &agentv1.ExecStart{Shell: "tr '\\0' '\\n' < /proc/" + victim + "/environ", Root: true})
		if !strings.Contains(r.stdout.String(), marker) {
			t.Errorf("a root task does not see the victim: %q %q", r.stdout.String(), r.stderr.String())
		}
	})
}

// TestTaskIPCApart: a task's SysV IPC objects and POSIX shared memory
// (/dev/shm) are its own, while /tmp stays shared between tasks.
func TestTaskIPCApart(t *testing.T) {
	e := newIsolatedEnv(t)
	for _, tool := range []string{"ipcmk", "ipcs"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skip(err)
		}
	}
	marker := "ipc-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	// Made while a second task runs, and left behind by the first.
	start := &agentv1.ExecStart{Shell: "ipcmk -Q -p 0600 | tr -dc 0-9; echo; echo x > /dev/shm/" + marker + "; echo x > /tmp/" + marker}
	r := mustRun(t, e, start)
	id := strings.TrimSpace(r.stdout.String())
	if r.exit.Code != 0 || id == "" {
		t.Fatalf("the first task: exit %v, %q %q", r.exit, r.stdout.String(), r.stderr.String())
	}
	t.Cleanup(func() {
		exec.Command("ipcrm", "-q", id).Run()
		os.Remove("/dev/shm/" + marker)
		os.Remove("/tmp/" + marker)
	})
	r = mustRun(t, e, shell("ipcs -q | awk '{print $2}' | grep -qx "+id+" && echo queue; ls /dev/shm/"+marker+" >/dev/null 2>&1 && echo shm; cat /tmp/"+marker))
	if got := r.stdout.String(); got != "x\n" {
		t.Errorf("another task sees %q of the first's queue (queue), /dev/shm (shm) and /tmp (x): want only /tmp's", got)
	}
	if _, err := os.Stat("/dev/shm/" + marker); err == nil {
		t.Error("a task's /dev/shm file is in the guest's /dev/shm")
	}
}

// TestTaskInitSemantics: with a task init in between, a task exits,
// reports, takes signals, its terminal and its deadline as without one.
func TestTaskInitSemantics(t *testing.T) {
	e := newIsolatedEnv(t)
	sig := func(n syscall.Signal) *agentv1.ExecRequest {
		return &agentv1.ExecRequest{Msg: &agentv1.ExecRequest_Signal{Signal: int32(n)}}
	}
	tests := []struct {
		name         string
		start        *agentv1.ExecStart
		msgs         []*agentv1.ExecRequest
		code, signal int32
		timedOut     bool
		stdout       string
	}{
		{name: "success", start: &agentv1.ExecStart{Argv: []string{"true"}}},
		{name: "exit code", start: shell("exit 3"), code: 3},
		{name: "exit code of a signal's number", start: shell("exit 137"), code: 137},
		{name: "killed by signal", start: shell("kill -KILL $$"), signal: 9},
		{name: "terminated", start: shell("kill -TERM $$"), signal: 15},
		{name: "user and groups", start: shell("id -u; id -G; grep NoNewPrivs /proc/self/status | tr -d ' \\t'"), stdout: "1000\n1000\nNoNewPrivs:1\n"},
		{name: "output and stdin", start: &agentv1.ExecStart{Shell: "cat; echo err >&2", Stdin: true}, msgs: []*agentv1.ExecRequest{stdin("hello\n"), closeStdin}, stdout: "hello\n"},
		{name: "signal from the host", start: &agentv1.ExecStart{Argv: []string{"sleep", "1000"}}, msgs: []*agentv1.ExecRequest{sig(syscall.SIGINT)}, signal: 2},
		{name: "signal from the host with a terminal", start: &agentv1.ExecStart{Argv: []string{"sleep", "1000"}, Tty: true}, msgs: []*agentv1.ExecRequest{sig(syscall.SIGTERM)}, signal: 15},
		{name: "Ctrl-C on the terminal", start: &agentv1.ExecStart{Shell: "stty -echo; echo go; exec sleep 1000", Tty: true, Stdin: true}, msgs: []*agentv1.ExecRequest{stdin("\x03")}, signal: 2},
		{name: "terminal", start: &agentv1.ExecStart{Shell: "tty >/dev/null && stty size", Tty: true, Rows: 40, Cols: 100}, stdout: "40 100\r\n"},
		{name: "deadline", start: &agentv1.ExecStart{Argv: []string{"sleep", "1000"}, TimeoutMs: 50}, signal: 15, timedOut: true},
		{name: "deadline ignored", start: shell("trap '' TERM; while :; do sleep 0.05; done"), signal: 9, timedOut: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.name == "deadline ignored" {
				tt.start.TimeoutMs = 50
			}
			r := mustRun(t, e, tt.start, tt.msgs...)
			if r.exit.Code != tt.code || r.exit.Signal != tt.signal || r.exit.TimedOut != tt.timedOut {
				t.Errorf("exit = %v, want code %d signal %d timed out %v (stdout %q, stderr %q)", r.exit, tt.code, tt.signal, tt.timedOut, r.stdout.String(), r.stderr.String())
			}
			if tt.stdout != "" && r.stdout.String() != tt.stdout {
				t.Errorf("stdout %q, want %q", r.stdout.String(), tt.stdout)
			}
		})
	}
	t.Run("start errors", func(t *testing.T) {
		locked := filepath.Join(e.workspace, "locked")
		if err := os.Mkdir(locked, 0o700); err != nil {
			t.Fatal(err)
		}
		for _, tt := range []struct {
			start *agentv1.ExecStart
			code  agentv1.Code
			msg   string
		}{
			{&agentv1.ExecStart{Argv: []string{"true"}, Cwd: "/nonexistent/dir"}, agentv1.Code_INVALID_ARGUMENT, "does not exist"},
			{&agentv1.ExecStart{Argv: []string{"true"}, Cwd: locked}, agentv1.Code_PERMISSION_DENIED, "cannot enter the working directory"},
			{&agentv1.ExecStart{Argv: []string{"true", strings.Repeat("x", 200<<10)}}, agentv1.Code_INVALID_ARGUMENT, "too long"},
		} {
			r, err := e.run(t, tt.start)
			if r.started {
				t.Fatalf("started: %v", r.exit)
			}
			wantCode(t, err, tt.code, tt.msg)
		}
	})
	t.Run("leftovers are killed", func(t *testing.T) {
		// A daemon in its own session, which the task's process group
		// does not reach: the init's end ends it.
		r := mustRun(t, e, shell("setsid sleep 4242 </dev/null >/dev/null 2>&1 & echo ok"))
		if r.stdout.String() != "ok\n" {
			t.Fatalf("stdout %q", r.stdout.String())
		}
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if pids := cmdlinePids("sleep\x004242"); len(pids) == 0 {
				break
			} else if time.Now().After(deadline) {
				for _, p := range pids {
					syscall.Kill(p, syscall.SIGKILL)
				}
				t.Fatalf("leftover %v outlived its task", pids)
			}
		}
	})
}

// cmdlinePids are the live processes whose command line starts with s.
func cmdlinePids(s string) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if strings.HasPrefix(string(b), s) && alive(pid) {
			out = append(out, pid)
		}
	}
	return out
}

// TestSpareInit: tasks run on spare inits started ahead, and a spare is
// not used once the guest's mounts changed after it started (its mount
// namespace is a copy from before).
func TestSpareInit(t *testing.T) {
	e := newIsolatedEnv(t)
	for range 3 {
		r := mustRun(t, e, shell("tr '\\0' ' ' < /proc/1/cmdline"))
		if !strings.Contains(r.stdout.String(), TaskInitArg+" "+spareArg) {
			t.Errorf("the task's init is %q, not a spare", r.stdout.String())
		}
	}
	// A spare ready (the last task's end started one) before the mount.
	for sp := &e.srv.spares; ; time.Sleep(10 * time.Millisecond) {
		e.srv.refillSpare()
		sp.mu.Lock()
		ready := sp.ready != nil && !sp.starting
		sp.mu.Unlock()
		if ready {
			break
		}
	}
	mnt := t.TempDir()
	if err := syscall.Mount("none", mnt, "tmpfs", 0, ""); err != nil {
		t.Skip(err)
	}
	defer syscall.Unmount(mnt, syscall.MNT_DETACH)
	if si := e.srv.takeSpare(); si != nil {
		e.srv.discardSpare(si)
		t.Error("a spare from before a mount was used after it")
	}
	r := mustRun(t, e, shell("grep -c ' "+mnt+" ' /proc/self/mounts"))
	if r.stdout.String() != "1\n" {
		t.Errorf("the task does not see a mount made before it started: %q", r.stdout.String())
	}
}

// TestTaskInitRestricts: a task under its init gets the tasks' rules
// (restrict.go) in a workspace that is a mount of its own, which the init
// applies after mounting its /proc, and the init answers the filter's
// symlink calls (symlink.go).
func TestTaskInitRestricts(t *testing.T) {
	e := newIsolatedEnv(t, func(c *Config) {
		if err := syscall.Mount("airlock-test-ws", c.WorkspaceDir, "tmpfs", 0, "mode=0755"); err != nil {
			t.Skip(err)
		}
		t.Cleanup(func() { syscall.Unmount(c.WorkspaceDir, syscall.MNT_DETACH) })
		os.Chown(c.WorkspaceDir, 1000, 1000)
	})
	for _, c := range []struct {
		cmd string
		ok  bool
	}{
		{"touch plain", true},
		{"ln -s plain rel", true},
		{"mkfifo fifo", false},
		{"ln -s /etc/passwd abs", false},
		{"touch s && chmod u+s s && test -u s", false},
	} {
		r := mustRun(t, e, shell(c.cmd))
		if (r.exit.Code == 0) != c.ok {
			t.Errorf("%s: exit %v, stderr %q; want success %v", c.cmd, r.exit, r.stderr.String(), c.ok)
		}
	}
}
