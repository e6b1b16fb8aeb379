package filelock

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

func TestExcludesAndReleases(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.lock")
	a, err := TryLock(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := TryLock(path); !errors.Is(err, ErrLocked) {
		t.Fatalf("second lock in the same process: %v, want ErrLocked", err)
	}
	if err := a.Unlock(); err != nil {
		t.Fatal(err)
	}
	if err := a.Unlock(); err != nil {
		t.Fatalf("second unlock: %v", err)
	}
	b, err := TryLock(path)
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	b.Unlock()
}

// TestOtherProcess holds the lock in a child process: the parent is
// refused while the child lives, and gets it once the child has died
// without unlocking (as a crashed service would).
func TestOtherProcess(t *testing.T) {
	if path := os.Getenv("FILELOCK_HOLD"); path != "" {
		if _, err := TryLock(path); err != nil {
			os.Exit(3)
		}
		os.Stdout.WriteString("held\n")
		os.Stdin.Read(make([]byte, 1)) // until the parent lets go
		os.Exit(0)
	}
	path := filepath.Join(t.TempDir(), "x.lock")
	cmd := exec.Command(os.Args[0], "-test.run=^TestOtherProcess$")
	cmd.Env = append(os.Environ(), "FILELOCK_HOLD="+path)
	stdin, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := out.Read(buf); err != nil || string(buf) != "held\n" {
		t.Fatalf("child: %q %v", buf, err)
	}
	if _, err := TryLock(path); !errors.Is(err, ErrLocked) {
		t.Fatalf("lock held by another process: %v, want ErrLocked", err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	stdin.Close()
	l, err := TryLock(path)
	if err != nil {
		t.Fatalf("lock after the holder died: %v", err)
	}
	l.Unlock()
}
