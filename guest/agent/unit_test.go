//go:build linux

package agent

import (
	"context"
	"os"
	"os/exec"
	"reflect"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	agentv1 "github.com/airlock-sandbox/airlock/guest/api/agent/v1"
)

func TestParseMounts(t *testing.T) {
	mounts := "proc /proc proc rw 0 0\nworkspace /workspace 9p rw,nosuid 0 0\n" +
		"workspace /workspace virtiofs ro,relatime 0 0\nx /workspace2 9p rw 0 0\n"
	got := parseMounts([]byte(mounts), "/workspace")
	if want := (workspaceMount{mounted: true, fs: "virtiofs", readOnly: true}); got != want {
		t.Errorf("parseMounts = %+v", got)
	}
	if got := parseMounts([]byte(mounts), "/nope"); got.mounted {
		t.Errorf("parseMounts(/nope) = %+v", got)
	}
}

func TestTaskEnv(t *testing.T) {
	env, err := taskEnv([]string{"PATH=/x", "A=1", "A=2", "B="}, "agent", "/home/agent", "/w", true)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"PATH=/x", "HOME=/home/agent", "USER=agent", "LOGNAME=agent", "SHELL=/bin/sh",
		"LANG=C.UTF-8", "PWD=/w", "TERM=xterm-256color", "A=2", "B="}
	if !reflect.DeepEqual(env, want) {
		t.Errorf("env = %q", env)
	}
}

// TestTaskEnvProxy: the proxy variables the host sends (both cases, with a
// per-task credential in the URL, NO_PROXY lists) pass validation
// unchanged, and the guest adds none of its own.
func TestTaskEnvProxy(t *testing.T) {
	proxy := []string{
		"HTTP_PROXY=http://task-0f3a:s3cr%2Ft~x@127.0.0.1:3128",
		"http_proxy=http://task-0f3a:s3cr%2Ft~x@127.0.0.1:3128",
		"HTTPS_PROXY=http://task-0f3a:s3cr%2Ft~x@127.0.0.1:3128",
		"https_proxy=http://task-0f3a:s3cr%2Ft~x@127.0.0.1:3128",
		"ALL_PROXY=socks5h://task-0f3a:s3cr%2Ft~x@127.0.0.1:1080",
		"all_proxy=socks5h://task-0f3a:s3cr%2Ft~x@127.0.0.1:1080",
		"NO_PROXY=localhost,127.0.0.1,::1,.local,[::1]:8080",
		"no_proxy=localhost,127.0.0.1,::1,.local,[::1]:8080",
	}
	env, err := taskEnv(proxy, "agent", "/home/agent", "/w", false)
	if err != nil {
		t.Fatal(err)
	}
	if got := env[len(env)-len(proxy):]; !reflect.DeepEqual(got, proxy) {
		t.Errorf("proxy env = %q, want %q", got, proxy)
	}
	env, err = taskEnv(nil, "agent", "/home/agent", "/w", false)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); strings.HasSuffix(strings.ToLower(k), "_proxy") {
			t.Errorf("default env has %s; only the host sets proxy variables", kv)
		}
	}
}

func TestNoGoroutineLeak(t *testing.T) {
	e := newEnv(t)
	mustRun(t, e, shell("true")) // the connection's own goroutines start here
	base := runtime.NumGoroutine()

	mustRun(t, e, &agentv1.ExecStart{Argv: []string{"cat"}, Stdin: true}, stdin("x"), closeStdin)
	mustRun(t, e, &agentv1.ExecStart{Argv: []string{"cat"}, Stdin: true, Tty: true}, stdin("x\n"), closeStdin)
	mustRun(t, e, &agentv1.ExecStart{Argv: []string{"sleep", "100"}, Stdin: true, TimeoutMs: 10})
	mustRun(t, e, shell("sleep 100 & echo started"))
	if _, err := e.run(t, &agentv1.ExecStart{Argv: []string{"no-such-command-xyz"}}); err == nil {
		t.Fatal("started a missing command")
	}
	ctx, cancel := context.WithCancel(testCtx(t))
	stream, err := e.exec(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	_ = stream.Send(&agentv1.ExecRequest{Msg: &agentv1.ExecRequest_Start{Start: &agentv1.ExecStart{Argv: []string{"sleep", "100"}, Stdin: true}}})
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	cancel()

	guard := time.After(20 * time.Second) // failure guard only
	for runtime.NumGoroutine() > base {
		select {
		case <-guard:
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, %d before:\n%s", runtime.NumGoroutine(), base, buf[:runtime.Stack(buf, true)])
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func TestTaskEnvDefaultPath(t *testing.T) {
	env, err := taskEnv(nil, "agent", "/home/agent", "/w", false)
	if err != nil {
		t.Fatal(err)
	}
	if env[0] != "PATH=/home/agent/.local/bin:"+defaultPath {
		t.Errorf("default %s: pip's user commands are not found", env[0])
	}
}

// TestRestrictPrivileges: run by a process without no_new_privs (init
// calls it first thing in PID 1), it sets the flag on every thread, or,
// where the runtime cannot reach every thread (cgo), on the calling one.
func TestRestrictPrivileges(t *testing.T) {
	if os.Getenv("AIRLOCK_NNP_CHILD") == "1" {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if v, _ := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0); v != 0 {
			t.Skip("started with no_new_privs already: nothing to check")
		}
		if err := RestrictPrivileges(); err != nil {
			t.Fatal(err)
		}
		if v, _ := unix.PrctlRetInt(unix.PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0); v != 1 {
			t.Fatal("the calling thread lacks no_new_privs")
		}
		if _, _, e := syscall.AllThreadsSyscall(syscall.SYS_GETPID, 0, 0, 0); e == syscall.ENOTSUP {
			t.Log("cgo: only the calling thread is checked")
			return
		}
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			t.Fatal(err)
		}
		for _, task := range tasks {
			b, err := os.ReadFile("/proc/self/task/" + task.Name() + "/status")
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(b), "\nNoNewPrivs:\t1\n") {
				t.Fatalf("thread %s lacks no_new_privs", task.Name())
			}
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestRestrictPrivileges$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "AIRLOCK_NNP_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	t.Logf("child: %s", out)
}

func TestSearchable(t *testing.T) {
	tests := []struct {
		owner, group, perm, uid, gid uint32
		want                         bool
	}{
		{0, 0, 0o700, 1000, 1000, false}, // root's private folder
		{0, 0, 0o755, 1000, 1000, true},  // others may search
		{0, 0, 0o750, 1000, 0, true},     // group may search
		{1000, 1000, 0o700, 1000, 1000, true},
		{1000, 1000, 0o077, 1000, 1000, false}, // the owner's own bits decide, not the others'
		{0, 1000, 0o705, 1000, 1000, false},    // the group's bits decide for the group
		{5, 5, 0o000, 0, 0, true},              // root searches anything
	}
	for _, tt := range tests {
		if got := searchable(tt.owner, tt.group, tt.perm, tt.uid, tt.gid); got != tt.want {
			t.Errorf("searchable(owner %d, group %d, %04o, uid %d, gid %d) = %v, want %v", tt.owner, tt.group, tt.perm, tt.uid, tt.gid, got, tt.want)
		}
	}
}
