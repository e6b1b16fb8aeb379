//go:build linux

package agent

import (
	"context"
	"reflect"
	"runtime"
	"testing"
	"time"

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
	stream, err := e.client.Exec(ctx)
	if err != nil {
		t.Fatal(err)
	}
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
