//go:build e2e

package clock_test

// The wiring the session uses, against a real guest in QEMU:
//
//	AIRLOCK_IMAGE_DIR=$PWD/images/out go test -tags e2e ./app/clock

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/app/clock"
	"github.com/airlock-sandbox/airlock/app/sandbox"
	"github.com/airlock-sandbox/airlock/guest/client"
)

// guestTime reads the guest's wall clock.
func guestTime(t *testing.T, ctx context.Context, sb *sandbox.Sandbox) time.Time {
	t.Helper()
	var out bytes.Buffer
	if _, err := sb.Agent().Exec(ctx, client.Spec{Argv: []string{"date", "+%s"}}, client.Stdio{Stdout: &out}); err != nil {
		t.Fatal(err)
	}
	s, err := strconv.ParseInt(strings.TrimSpace(out.String()), 10, 64)
	if err != nil {
		t.Fatalf("guest date %q: %v", out.String(), err)
	}
	return time.Unix(s, 0)
}

// TestE2EResyncAfterJump plays a sleep and wake: the guest's clock falls an
// hour behind (as a VM paused through a host sleep does), the watcher sees
// the host's wall clock jump, and its callback sets the guest's clock
// through the agent.
func TestE2EResyncAfterJump(t *testing.T) {
	root := os.Getenv("AIRLOCK_IMAGE_DIR")
	if root == "" {
		root = filepath.Join("..", "..", "images", "out")
	}
	img, err := sandbox.LoadImage(sandbox.ImageDirUnder(root, sandbox.DefaultImage, runtime.GOARCH))
	if err != nil {
		t.Skipf("no guest image: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sb, err := sandbox.Start(ctx, sandbox.Options{Image: img, MemoryMiB: 512})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close(context.Background())

	if err := sb.Agent().SetTime(ctx, time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	if behind := time.Since(guestTime(t, ctx, sb)); behind < 59*time.Minute {
		t.Fatalf("guest clock only %s behind after setting it back", behind)
	}

	f := &clock.Manual{Wall: time.Now().Round(0)}
	synced := make(chan error, 1)
	w := clock.New(clock.Options{Interval: 10 * time.Millisecond, Clock: f}, func(ctx context.Context, j clock.Jump) {
		t.Logf("jump: %+v", j)
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		synced <- sb.Agent().SetTime(sctx, time.Now())
	})
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	go w.Run(wctx)
	time.Sleep(50 * time.Millisecond)
	f.Advance(time.Hour, 0) // the wake
	select {
	case err := <-synced:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the watcher did not call back")
	}
	if d := time.Since(guestTime(t, ctx, sb)); d > 3*time.Second || d < -3*time.Second {
		t.Errorf("guest clock off by %s after the resync", d)
	}
}
