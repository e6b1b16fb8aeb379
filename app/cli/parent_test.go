//go:build !windows

package cli

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestWatchParentChild is not a test: run by TestWatchParentEnds as a
// separate process, it watches AIRLOCK_TEST_WATCH_PID and prints what it
// saw.
func TestWatchParentChild(t *testing.T) {
	pid, err := strconv.Atoi(os.Getenv("AIRLOCK_TEST_WATCH_PID"))
	if err != nil {
		t.Skip("run by TestWatchParentEnds")
	}
	ctx, stop, err := watchParent(context.Background(), pid, 50*time.Millisecond)
	if err != nil {
		os.Stdout.WriteString("error: " + err.Error() + "\n")
		os.Exit(3)
	}
	defer stop()
	os.Stdout.WriteString("watching\n")
	select {
	case <-ctx.Done():
		os.Stdout.WriteString("ended: " + context.Cause(ctx).Error() + "\n")
		os.Exit(0)
	case <-time.After(30 * time.Second):
		os.Exit(4)
	}
}

// A process watching its parent (as `airlock serve --parent-pid` started
// by the desktop app does) sees the parent end when the parent is killed
// with SIGKILL, as a crashed app would be; so does one watching a process
// that is not its parent.
func TestWatchParentEnds(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	childArgs := []string{"-test.run=^TestWatchParentChild$", "-test.v=false"}
	for _, tc := range []string{"parent", "other"} {
		t.Run(tc, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "child.out")
			var victim *exec.Cmd
			switch tc {
			case "parent":
				// sh starts the watcher with its own pid, then waits: the
				// watcher's parent is sh, which the test kills.
				victim = exec.Command("sh", "-c", `AIRLOCK_TEST_WATCH_PID=$$ "$0" "$@" >"$OUT" 2>&1 & wait`, exe)
				victim.Args = append(victim.Args, childArgs...)
				victim.Env = append(os.Environ(), "OUT="+out)
				if err := victim.Start(); err != nil {
					t.Fatal(err)
				}
			case "other":
				victim = exec.Command("sleep", "60")
				if err := victim.Start(); err != nil {
					t.Fatal(err)
				}
				f, err := os.Create(out)
				if err != nil {
					t.Fatal(err)
				}
				child := exec.Command(exe, childArgs...)
				child.Env = append(os.Environ(), "AIRLOCK_TEST_WATCH_PID="+strconv.Itoa(victim.Process.Pid))
				child.Stdout, child.Stderr = f, f
				if err := child.Start(); err != nil {
					t.Fatal(err)
				}
				f.Close()
				t.Cleanup(func() { child.Process.Kill(); child.Wait() })
			}
			waitLine(t, out, "watching", 10*time.Second)
			victim.Process.Kill()
			victim.Wait()
			killed := time.Now()
			line := waitLine(t, out, "ended: ", 5*time.Second)
			t.Logf("%s after %s", line, time.Since(killed).Round(time.Millisecond))
			if !strings.Contains(line, "(pid "+strconv.Itoa(victim.Process.Pid)+") ended") {
				t.Fatalf("the watcher said %q", line)
			}
		})
	}
}

// waitLine waits for a line of the file that starts with prefix.
func waitLine(t *testing.T, file, prefix string, within time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if f, err := os.Open(file); err == nil {
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				if strings.HasPrefix(sc.Text(), prefix) {
					f.Close()
					return sc.Text()
				}
			}
			f.Close()
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(file)
			t.Fatalf("no %q line within %s; the watcher wrote %q", prefix, within, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A process id that names nothing is refused at once.
func TestWatchParentNoSuchProcess(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range []int{0, -1, cmd.Process.Pid} {
		if _, _, err := watchParent(context.Background(), pid, time.Second); err == nil {
			t.Errorf("watchParent(%d) accepted a pid that names no process", pid)
		}
	}
}
