//go:build linux

package agent

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	agentv1 "github.com/airlock-sandbox/airlock/guest/api/agent/v1"
	"github.com/airlock-sandbox/airlock/guest/api/execwire"
)

func TestExitStatus(t *testing.T) {
	e := newEnv(t)
	tests := []struct {
		name   string
		start  *agentv1.ExecStart
		code   int32
		signal int32
	}{
		{"success", &agentv1.ExecStart{Argv: []string{"true"}}, 0, 0},
		{"exit code", shell("exit 3"), 3, 0},
		{"killed by signal", shell("kill -KILL $$"), 0, 9},
		{"terminated", shell("kill -TERM $$"), 0, 15},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustRun(t, e, tt.start)
			if r.exit.Code != tt.code || r.exit.Signal != tt.signal || r.exit.TimedOut {
				t.Errorf("exit = %v, want code %d signal %d", r.exit, tt.code, tt.signal)
			}
		})
	}
}

// pidReaper is a Reaper for tests: where PID 1's loop reaps every child
// and sends each status to the channel Spawn registered, it waits for each
// child by its pid.
type pidReaper struct{ spawned atomic.Int64 }

func (r *pidReaper) Spawn(start func() (int, error)) (<-chan syscall.WaitStatus, error) {
	pid, err := start()
	if err != nil {
		return nil, err
	}
	r.spawned.Add(1)
	ch := make(chan syscall.WaitStatus, 1)
	go func() {
		var ws syscall.WaitStatus
		for {
			if _, err := syscall.Wait4(pid, &ws, 0, nil); err != syscall.EINTR {
				break
			}
		}
		ch <- ws
	}()
	return ch, nil
}

// TestExitStatusReaper: with a Reaper (the agent in PID 1), every task is
// forked through it and its status comes from it, the same as without.
func TestExitStatusReaper(t *testing.T) {
	r := &pidReaper{}
	e := newEnv(t, func(c *Config) { c.Reaper = r })
	tests := []struct {
		start        *agentv1.ExecStart
		code, signal int32
	}{
		{&agentv1.ExecStart{Argv: []string{"true"}}, 0, 0},
		{shell("exit 7"), 7, 0},
		{shell("kill -KILL $$"), 0, 9},
	}
	for _, tt := range tests {
		res := mustRun(t, e, tt.start)
		if res.exit.Code != tt.code || res.exit.Signal != tt.signal {
			t.Errorf("%v: exit = %v, want code %d signal %d", tt.start.GetArgv(), res.exit, tt.code, tt.signal)
		}
	}
	if _, err := e.run(t, &agentv1.ExecStart{Argv: []string{"/nonexistent"}}); err == nil {
		t.Error("a task that cannot start ran")
	}
	if n := r.spawned.Load(); n != int64(len(tests)) {
		t.Errorf("%d tasks forked through the Reaper, want %d", n, len(tests))
	}
}

func TestOutputSeparation(t *testing.T) {
	e := newEnv(t)
	r := mustRun(t, e, shell("echo out; echo err >&2; echo out2"))
	if got := r.stdout.String(); got != "out\nout2\n" {
		t.Errorf("stdout = %q", got)
	}
	if got := r.stderr.String(); got != "err\n" {
		t.Errorf("stderr = %q", got)
	}
}

func TestStdin(t *testing.T) {
	e := newEnv(t)
	t.Run("streamed and closed", func(t *testing.T) {
		r := mustRun(t, e, &agentv1.ExecStart{Argv: []string{"cat"}, Stdin: true},
			stdin("hello "), stdin("world"), closeStdin)
		if got := r.stdout.String(); got != "hello world" || r.exit.Code != 0 {
			t.Errorf("stdout = %q, exit %v", got, r.exit)
		}
	})
	t.Run("not asked for is /dev/null", func(t *testing.T) {
		r := mustRun(t, e, &agentv1.ExecStart{Argv: []string{"cat"}})
		if r.stdout.Len() != 0 || r.exit.Code != 0 {
			t.Errorf("stdout = %q, exit %v", r.stdout.String(), r.exit)
		}
	})
	t.Run("the host's end of the stream ends the task", func(t *testing.T) {
		// The host never half-closes a task's stream: its end, even of
		// writing only, abandons the task, which is killed.
		stream, err := e.exec(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		defer stream.Close()
		start := &agentv1.ExecStart{Argv: []string{"sleep", "1000"}, Stdin: true}
		if err := stream.Send(&agentv1.ExecRequest{Msg: &agentv1.ExecRequest_Start{Start: start}}); err != nil {
			t.Fatal(err)
		}
		if err := stream.c.CloseWrite(); err != nil {
			t.Fatal(err)
		}
		r, err := collect(t, stream)
		if err != nil || r.exit.GetSignal() != int32(syscall.SIGKILL) {
			t.Errorf("exit %v, err %v", r.exit, err)
		}
	})
	t.Run("task ignoring stdin", func(t *testing.T) {
		big := strings.Repeat("x", 1<<20)
		var msgs []*agentv1.ExecRequest
		for range 20 {
			msgs = append(msgs, stdin(big))
		}
		// The task closes its stdin and never ends by itself: the agent must
		// still take the 20 MiB and then the signal.
		msgs = append(msgs, &agentv1.ExecRequest{Msg: &agentv1.ExecRequest_Signal{Signal: int32(syscall.SIGKILL)}})
		r := mustRun(t, e, &agentv1.ExecStart{Shell: "exec 0<&-; echo closed; exec sleep 1000", Stdin: true}, msgs...)
		if r.stdout.String() != "closed\n" || r.exit.Signal != int32(syscall.SIGKILL) {
			t.Errorf("stdout %q, exit %v", r.stdout.String(), r.exit)
		}
	})
}

func TestLargeOutput(t *testing.T) {
	e := newEnv(t)
	data := make([]byte, 20<<20)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(e.workspace, "big")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	r := mustRun(t, e, &agentv1.ExecStart{Shell: "cat big; cat big >&2", Cwd: e.workspace})
	want := sha256.Sum256(data)
	if got := sha256.Sum256(r.stdout.Bytes()); got != want || r.stdout.Len() != len(data) {
		t.Errorf("stdout: %d bytes, sha256 mismatch %v", r.stdout.Len(), got != want)
	}
	if got := sha256.Sum256(r.stderr.Bytes()); got != want {
		t.Errorf("stderr: %d bytes, sha256 mismatch", r.stderr.Len())
	}
}

func TestUserAndPrivileges(t *testing.T) {
	e := newEnv(t)
	tests := []struct {
		name  string
		start *agentv1.ExecStart
		want  string
	}{
		{"unprivileged by default", shell("id -u; id -g; id -G"), "1000\n1000\n1000\n"},
		{"root when asked", &agentv1.ExecStart{Shell: "id -u", Root: true}, "0\n"},
		{"no_new_privs", shell("grep NoNewPrivs /proc/self/status"), "NoNewPrivs:\t1\n"},
		{"no_new_privs as root", &agentv1.ExecStart{Shell: "grep NoNewPrivs /proc/self/status", Root: true}, "NoNewPrivs:\t1\n"},
		{"clean environment", shell("echo $HOME:$USER:$LOGNAME:$SHELL:$LANG:$TERM"), e.home + ":agent:agent:/bin/sh:C.UTF-8:\n"},
		{"root environment", &agentv1.ExecStart{Shell: "echo $HOME:$USER", Root: true}, "/root:root\n"},
		{"env added and overridden", &agentv1.ExecStart{Shell: "echo $FOO:$LANG", Env: []string{"FOO=a=b", "LANG=de_DE.UTF-8"}}, "a=b:de_DE.UTF-8\n"},
		// The test workspace is not a mount point, so the default is home.
		{"default cwd", shell("pwd"), e.home + "\n"},
		{"relative cwd", &agentv1.ExecStart{Shell: "pwd", Cwd: "."}, e.home + "\n"},
		{"own process group", shell("ps -o pgid= -p $$; echo $$"), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustRun(t, e, tt.start)
			if tt.want == "" { // own process group: pgid == pid
				f := strings.Fields(r.stdout.String())
				if len(f) != 2 || f[0] != f[1] {
					t.Skipf("ps output %q (stderr %q)", r.stdout.String(), r.stderr.String())
				}
				return
			}
			if got := r.stdout.String(); got != tt.want || r.exit.Code != 0 {
				t.Errorf("stdout = %q (stderr %q, exit %v), want %q", got, r.stderr.String(), r.exit, tt.want)
			}
		})
	}
}

func TestStartErrors(t *testing.T) {
	e := newEnv(t)
	script := filepath.Join(e.workspace, "notexec")
	if err := os.WriteFile(script, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		start *agentv1.ExecStart
		code  agentv1.Code
		msg   string
	}{
		{"not found", &agentv1.ExecStart{Argv: []string{"no-such-command-xyz"}}, agentv1.Code_NOT_FOUND, "command not found: no-such-command-xyz"},
		{"not found by path", &agentv1.ExecStart{Argv: []string{"/nonexistent/bin/x"}}, agentv1.Code_NOT_FOUND, "command not found: /nonexistent/bin/x"},
		{"not found with PATH", &agentv1.ExecStart{Argv: []string{"ls"}, Env: []string{"PATH=/nonexistent"}}, agentv1.Code_NOT_FOUND, "command not found: ls"},
		{"not executable", &agentv1.ExecStart{Argv: []string{script}}, agentv1.Code_PERMISSION_DENIED, "not executable"},
		{"directory", &agentv1.ExecStart{Argv: []string{"/tmp"}}, agentv1.Code_PERMISSION_DENIED, "not executable"},
		{"bad cwd", &agentv1.ExecStart{Argv: []string{"true"}, Cwd: "/nonexistent/dir"}, agentv1.Code_INVALID_ARGUMENT, "/nonexistent/dir does not exist"},
		{"cwd is a file", &agentv1.ExecStart{Argv: []string{"true"}, Cwd: script}, agentv1.Code_INVALID_ARGUMENT, "is not a directory"},
		{"nothing to run", &agentv1.ExecStart{}, agentv1.Code_INVALID_ARGUMENT, "nothing to run"},
		{"argv and shell", &agentv1.ExecStart{Argv: []string{"true"}, Shell: "true"}, agentv1.Code_INVALID_ARGUMENT, "not both"},
		{"empty name", &agentv1.ExecStart{Argv: []string{""}}, agentv1.Code_INVALID_ARGUMENT, "empty command"},
		{"NUL in argv", &agentv1.ExecStart{Argv: []string{"echo", "a\x00b"}}, agentv1.Code_INVALID_ARGUMENT, "NUL"},
		{"bad env", &agentv1.ExecStart{Argv: []string{"true"}, Env: []string{"NOEQUALS"}}, agentv1.Code_INVALID_ARGUMENT, "KEY=VALUE"},
		{"empty env key", &agentv1.ExecStart{Argv: []string{"true"}, Env: []string{"=x"}}, agentv1.Code_INVALID_ARGUMENT, "KEY=VALUE"},
		{"too many env", &agentv1.ExecStart{Argv: []string{"true"}, Env: make([]string, maxEnv+1)}, agentv1.Code_INVALID_ARGUMENT, "environment entries"},
		{"negative timeout", &agentv1.ExecStart{Argv: []string{"true"}, TimeoutMs: -1}, agentv1.Code_INVALID_ARGUMENT, "timeout"},
		{"argument too long for exec", &agentv1.ExecStart{Argv: []string{"true", strings.Repeat("x", 200<<10)}}, agentv1.Code_INVALID_ARGUMENT, "too long"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := e.run(t, tt.start)
			if r.started {
				t.Fatalf("started: %v", r.exit)
			}
			wantCode(t, err, tt.code, tt.msg)
		})
	}
	t.Run("first message not start", func(t *testing.T) {
		stream, err := e.exec(testCtx(t))
		if err != nil {
			t.Fatal(err)
		}
		defer stream.Close()
		if err := stream.Send(stdin("x")); err != nil {
			t.Fatal(err)
		}
		_, err = stream.Recv()
		wantCode(t, err, agentv1.Code_INVALID_ARGUMENT, "first message must be start")
	})
}

func TestTTY(t *testing.T) {
	e := newEnv(t)
	t.Run("terminal", func(t *testing.T) {
		r := mustRun(t, e, &agentv1.ExecStart{Shell: "tty; stty size; echo $TERM; echo err >&2", Tty: true, Rows: 40, Cols: 100})
		got := lines(&r.stdout)
		if len(got) != 4 || !strings.HasPrefix(got[0], "/dev/pts/") || got[1] != "40 100" || got[2] != "xterm-256color" || got[3] != "err" {
			t.Errorf("output %q", got)
		}
		if r.stderr.Len() != 0 {
			t.Errorf("stderr with a tty: %q", r.stderr.String())
		}
	})
	t.Run("resize", func(t *testing.T) {
		resize := &agentv1.ExecRequest{Msg: &agentv1.ExecRequest_Resize{Resize: &agentv1.Resize{Rows: 50, Cols: 120}}}
		r := mustRun(t, e, &agentv1.ExecStart{Shell: "stty -echo; echo go; read x; stty size", Tty: true, Stdin: true},
			resize, stdin("\n"))
		if got := lines(&r.stdout); len(got) == 0 || got[len(got)-1] != "50 120" {
			t.Errorf("output %q", got)
		}
	})
	t.Run("close stdin is end of input", func(t *testing.T) {
		r := mustRun(t, e, &agentv1.ExecStart{Shell: "stty -echo; cat; echo done", Tty: true, Stdin: true},
			stdin("abc\n"), closeStdin)
		// Input may be echoed before stty -echo ran; the end is what counts.
		if got := lines(&r.stdout); len(got) < 2 || got[len(got)-2] != "abc" || got[len(got)-1] != "done" {
			t.Errorf("output %q", got)
		}
	})
}

func TestSignal(t *testing.T) {
	e := newEnv(t)
	sig := func(n int32) *agentv1.ExecRequest {
		return &agentv1.ExecRequest{Msg: &agentv1.ExecRequest_Signal{Signal: n}}
	}
	// Bad signals are ignored; the good one ends the task.
	r := mustRun(t, e, &agentv1.ExecStart{Argv: []string{"sleep", "1000"}}, sig(0), sig(65), sig(-9), sig(int32(syscall.SIGINT)))
	if r.exit.Signal != int32(syscall.SIGINT) {
		t.Errorf("exit = %v", r.exit)
	}
}

func TestDeadline(t *testing.T) {
	e := newEnv(t)
	t.Run("terminated", func(t *testing.T) {
		r := mustRun(t, e, &agentv1.ExecStart{Argv: []string{"sleep", "1000"}, TimeoutMs: 50})
		if !r.exit.TimedOut || r.exit.Signal != int32(syscall.SIGTERM) {
			t.Errorf("exit = %v", r.exit)
		}
	})
	t.Run("killed after grace", func(t *testing.T) {
		r := mustRun(t, e, &agentv1.ExecStart{Shell: "trap '' TERM; echo armed; while :; do sleep 0.05; done", TimeoutMs: 50})
		if !r.exit.TimedOut || r.exit.Signal != int32(syscall.SIGKILL) {
			t.Errorf("exit = %v, stdout %q", r.exit, r.stdout.String())
		}
	})
	t.Run("finished in time", func(t *testing.T) {
		r := mustRun(t, e, &agentv1.ExecStart{Argv: []string{"true"}, TimeoutMs: 60_000})
		if r.exit.TimedOut || r.exit.Code != 0 {
			t.Errorf("exit = %v", r.exit)
		}
	})
}

// daemonScript starts a grandchild in its own session, out of the task's
// process group, records its pid, and waits until it runs.
func daemonScript(pidfile string) string {
	return fmt.Sprintf(`setsid sh -c 'echo $$ > %[1]s.tmp; mv %[1]s.tmp %[1]s; exec sleep 1000' </dev/null >/dev/null 2>&1 &
while [ ! -s %[1]s ]; do sleep 0.01; done; echo ready`, pidfile)
}

func TestLeftoversAreKilled(t *testing.T) {
	e := newEnv(t)
	if !e.cgroups {
		t.Skip("no writable cgroup2: a daemonised process escapes the process group")
	}
	t.Run("in own cgroup", func(t *testing.T) {
		r := mustRun(t, e, shell("cat /proc/self/cgroup"))
		if !strings.Contains(r.stdout.String(), "/airlock-test-") {
			t.Errorf("cgroup %q", r.stdout.String())
		}
	})
	t.Run("after exit", func(t *testing.T) {
		pidfile := filepath.Join(e.workspace, "daemon1")
		r := mustRun(t, e, shell(daemonScript(pidfile)))
		if r.stdout.String() != "ready\n" || r.exit.Code != 0 {
			t.Fatalf("stdout %q stderr %q exit %v", r.stdout.String(), r.stderr.String(), r.exit)
		}
		if pid := readPid(t, pidfile); alive(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
			t.Errorf("daemon %d outlived its task", pid)
		}
	})
	t.Run("on cancel", func(t *testing.T) {
		pidfile := filepath.Join(e.workspace, "daemon2")
		ctx, cancel := context.WithCancel(testCtx(t))
		defer cancel()
		stream, err := e.exec(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer stream.Close()
		start := shell(daemonScript(pidfile) + "; sleep 1000")
		if err := stream.Send(&agentv1.ExecRequest{Msg: &agentv1.ExecRequest_Start{Start: start}}); err != nil {
			t.Fatal(err)
		}
		var out string
		for !strings.Contains(out, "ready") {
			ev, err := stream.Recv()
			if err != nil {
				t.Fatal(err)
			}
			if ev.kind == execwire.KindStdout {
				out += string(ev.data)
			}
		}
		pid := readPid(t, pidfile)
		cancel()
		// The agent kills the tree when it sees the cancellation; wait for
		// that (bounded by the test context only).
		for alive(pid) {
			select {
			case <-testCtx(t).Done():
				t.Fatal("daemon survived the cancelled task")
			case <-time.After(10 * time.Millisecond):
			}
		}
	})
}
