package boot

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/guest/console"
)

// TestReaper: PID 1's one reap loop gives each child started by Spawn its
// own exit status, even when many start and end at once, and reaps what
// they orphan. Run in a child process that is a subreaper, so orphans come
// to it as they come to PID 1, and no other test's children are reaped.
func TestReaper(t *testing.T) {
	if os.Getenv("AIRLOCK_REAPER_CHILD") != "1" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestReaper$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), "AIRLOCK_REAPER_CHILD=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS") {
			t.Fatalf("child: %v\n%s", err, out)
		}
		return
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Skipf("no subreaper: %v", err)
	}
	in := &pid1{
		log:     console.NewLogger(os.Stderr, "", false),
		waiting: make(map[int]chan syscall.WaitStatus),
		spawned: make(chan struct{}, 1),
	}
	go in.reapLoop()
	spawn := func(script string, stdout *strings.Builder) (*exec.Cmd, <-chan syscall.WaitStatus) {
		t.Helper()
		cmd := exec.Command("/bin/sh", "-c", script)
		if stdout != nil {
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			cmd.Stdout = w
			defer func() {
				w.Close()
				b := make([]byte, 64)
				n, _ := r.Read(b)
				stdout.Write(b[:n])
			}()
		}
		ch, err := in.Spawn(func() (int, error) {
			if err := cmd.Start(); err != nil {
				return 0, err
			}
			return cmd.Process.Pid, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return cmd, ch
	}
	status := func(ch <-chan syscall.WaitStatus) syscall.WaitStatus {
		t.Helper()
		select {
		case ws := <-ch:
			return ws
		case <-time.After(10 * time.Second):
			t.Fatal("no exit status within 10 s")
			return 0
		}
	}

	if ws := status(func() <-chan syscall.WaitStatus { _, ch := spawn("exit 3", nil); return ch }()); ws.ExitStatus() != 3 {
		t.Errorf("exit 3: status %v", ws)
	}
	if ws := status(func() <-chan syscall.WaitStatus { _, ch := spawn("kill -9 $$", nil); return ch }()); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("kill -9: status %v", ws)
	}
	if _, err := in.Spawn(func() (int, error) { return 0, fmt.Errorf("no fork") }); err == nil {
		t.Error("Spawn hid start's error")
	}

	// Many at once, each with its own status.
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, ch := spawn("exit "+strconv.Itoa(i), nil)
			if ws := status(ch); ws.ExitStatus() != i {
				t.Errorf("exit %d: status %v", i, ws)
			}
		}()
	}
	wg.Wait()

	// An orphan: the shell exits at once, its background sleep is
	// reparented here and reaped when it ends.
	var out strings.Builder
	_, ch := spawn("sleep 0.3 & echo $!", &out)
	status(ch)
	orphan, err := strconv.Atoi(strings.TrimSpace(out.String()))
	if err != nil {
		t.Fatalf("orphan pid %q", out.String())
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		if _, err := os.Stat("/proc/" + strconv.Itoa(orphan)); os.IsNotExist(err) {
			break // reaped: not even a zombie left
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile("/proc/" + strconv.Itoa(orphan) + "/stat")
			t.Fatalf("the orphan %d was not reaped: %s", orphan, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	in.reapMu.Lock()
	defer in.reapMu.Unlock()
	if len(in.waiting) != 0 {
		t.Errorf("%d children still registered", len(in.waiting))
	}
}
