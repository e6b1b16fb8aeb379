//go:build e2e

package session

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/app/sandbox"
	"github.com/airlock-sandbox/airlock/guest/client"
)

// TestSessionRealVM boots the real guest image through a session, runs
// tasks on the warm VM, kills QEMU with SIGKILL and sees the session bring a
// new generation back. It needs the image: go run ./images/cmd/airlock-image
// -arch amd64 -q (or AIRLOCK_IMAGE_DIR).
func TestSessionRealVM(t *testing.T) {
	root := os.Getenv("AIRLOCK_IMAGE_DIR")
	if root == "" {
		root = filepath.Join("..", "..", "images", "out")
	}
	root, err := filepath.Abs(root) // QEMU does not run in this folder
	if err != nil {
		t.Fatal(err)
	}
	img, err := sandbox.LoadImage(sandbox.ImageDirUnder(root, sandbox.DefaultImage, runtime.GOARCH))
	if err != nil {
		t.Fatalf("guest image: %v (build it with `go run ./images/cmd/airlock-image -arch %s -q`)", err, runtime.GOARCH)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	lost := make(chan int, 4)
	s := New(Config{
		Sandbox: sandbox.Options{Image: img, MemoryMiB: 512},
		Logger:  slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})),
		OnLost:  func(gen int, err error) { t.Logf("lost generation %d: %v", gen, err); lost <- gen },
	})
	defer func() {
		if err := s.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	}()
	if err := s.SetWorkspace(ctx, t.TempDir(), false); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	cold := time.Since(began)
	st := s.Status()
	if st.State != StateRunning || st.Generation != 1 || st.PID == 0 || st.MachineType == "" {
		t.Fatalf("after Start: %+v", st)
	}

	task := func() (time.Duration, int) {
		t.Helper()
		began := time.Now()
		agent, gen, err := s.Agent(ctx)
		if err != nil {
			t.Fatal(err)
		}
		exit, err := agent.Exec(ctx, client.Spec{ID: "e2e", Argv: []string{"true"}}, client.Stdio{})
		if err != nil || exit.ShellCode() != 0 {
			t.Fatalf("true on generation %d: exit %+v, %v", gen, exit, err)
		}
		return time.Since(began), gen
	}
	warm1, _ := task()
	warm2, _ := task()
	t.Logf("boot %s (Start returned after %s, accelerator %s on %s); warm task round trips %s and %s: %.0fx faster than a boot",
		st.BootTime.Round(time.Millisecond), cold.Round(time.Millisecond), st.Accelerator, st.MachineType,
		warm1.Round(time.Microsecond), warm2.Round(time.Microsecond), float64(st.BootTime)/float64(warm2))

	// Kill QEMU as the OOM killer would.
	pid1 := st.PID
	if err := syscall.Kill(pid1, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	select {
	case gen := <-lost:
		if gen != 1 {
			t.Fatalf("lost generation %d, want 1", gen)
		}
	case <-ctx.Done():
		t.Fatalf("the session never noticed the kill: %+v", s.Status())
	}
	took, gen := task()
	st2 := s.Status()
	t.Logf("back %s after the kill (boot %s); the first task on generation %d took %s",
		time.Since(killed).Round(time.Millisecond), st2.BootTime.Round(time.Millisecond), gen, took.Round(time.Millisecond))
	if gen != 2 || st2.Generation != 2 || st2.Restarts != 1 || st2.PID == pid1 {
		t.Fatalf("after the kill: generation %d, %+v", gen, st2)
	}

	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	for _, pid := range []int{pid1, st2.PID} {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("QEMU process %d still exists after Stop (%v)", pid, err)
		}
	}
}
