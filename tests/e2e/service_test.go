//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/app/api"
	"github.com/airlock-sandbox/airlock/app/service"
	"github.com/airlock-sandbox/airlock/app/tasks"
	"github.com/airlock-sandbox/airlock/tests/internal/vmharness"
)

// served is one `airlock serve` process with its own folders.
type served struct {
	t      *testing.T
	env    []string
	sock   string
	cmd    *exec.Cmd
	stderr bytes.Buffer
	client *api.Client
}

func startServe(t *testing.T, root string) *served {
	t.Helper()
	s := &served{t: t, env: append(os.Environ(),
		"AIRLOCK_IMAGE_DIR="+imageRoot,
		"XDG_RUNTIME_DIR="+filepath.Join(root, "run"),
		"XDG_CONFIG_HOME="+filepath.Join(root, "config"),
		"XDG_STATE_HOME="+filepath.Join(root, "state"),
		"XDG_CACHE_HOME="+filepath.Join(root, "cache"))}
	s.sock = filepath.Join(root, "run", "airlock", "airlock.sock")
	s.cmd = exec.Command(airlockBin, "serve")
	s.cmd.Env = s.env
	s.cmd.Stderr = &s.stderr
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s.client = api.NewClient(s.sock)
	for i := 0; s.client.Ping(context.Background()) != nil; i++ {
		if i > 200 {
			t.Fatalf("airlock serve did not answer: %s", s.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return s
}

// cli runs an airlock command against this service.
func (s *served) cli(stdin string, args ...string) (int, string, string) {
	s.t.Helper()
	cmd := exec.Command(airlockBin, args...)
	cmd.Env = s.env
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		s.t.Fatal(err)
	}
	return code, out.String(), errOut.String()
}

func (s *served) stop() {
	s.cmd.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		s.cmd.Process.Kill()
		s.t.Errorf("airlock serve did not stop on SIGINT: %s", s.stderr.String())
	}
}

func (s *served) wait(id string) tasks.Task {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	t, err := s.client.Wait(ctx, id)
	if err != nil {
		s.t.Fatal(err)
	}
	return t
}

// residentMiB is process pid's resident memory.
func residentMiB(t *testing.T, pid int) int {
	kib, err := vmharness.ResidentKiB(pid)
	if err != nil {
		t.Fatal(err)
	}
	return kib >> 10
}

// TestService drives `airlock serve` end to end: warm tasks against a cold
// run, the VM killed under a task, a restart of the host keeping history,
// 64 concurrent tasks byte-exact, and nothing left behind.
func TestService(t *testing.T) {
	root, err := os.MkdirTemp("", "airlock-serve-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(root)
	ws := ownedByTaskUser(filepath.Join(root, "ws"))
	os.Mkdir(ws, 0o755)
	ws = ownedByTaskUser(ws)
	s := startServe(t, root)
	defer func() { s.stop() }()

	code, out, errOut := s.cli("", "workspace", "set", ws)
	if code != 0 || !strings.Contains(out, "vm running") {
		t.Fatalf("workspace set: %d %q %q", code, out, errOut)
	}

	// Warm against cold: the same command through the service and through a
	// fresh VM.
	began := time.Now()
	code, out, _ = s.cli("hi\n", "run", "--", "sh", "-c", "cat; echo warm > /workspace/w.txt")
	warm := time.Since(began)
	if code != 0 || out != "hi\n" {
		t.Fatalf("warm run: %d %q", code, out)
	}
	began = time.Now()
	code, _, _ = s.cli("", "run", "--ephemeral", "--", "true")
	cold := time.Since(began)
	if code != 0 {
		t.Fatalf("ephemeral run: %d", code)
	}
	t.Logf("task through the running service %s, ephemeral VM %s (%.0fx)", warm.Round(time.Millisecond), cold.Round(time.Millisecond), cold.Seconds()/warm.Seconds())
	if b, _ := os.ReadFile(filepath.Join(ws, "w.txt")); string(b) != "warm\n" {
		t.Fatalf("workspace file %q", b)
	}
	if code, _, _ := s.cli("", "run", "--", "sh", "-c", "exit 9"); code != 9 {
		t.Fatalf("exit code through the service: %d", code)
	}

	// Memory the guest frees goes back to the host (free page reporting):
	// 400 MB made and deleted in the guest's tmpfs.
	st, err := s.client.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := s.cli("", "run", "--", "dd", "if=/dev/zero", "of=/tmp/fill", "bs=1048576", "count=400"); code != 0 {
		t.Fatalf("fill: %d %q", code, errOut)
	}
	peak := residentMiB(t, st.Session.PID) // the file still holds its pages
	if code, _, errOut := s.cli("", "run", "--", "rm", "/tmp/fill"); code != 0 {
		t.Fatalf("rm: %d %q", code, errOut)
	}
	low := peak
	for deadline := time.Now().Add(30 * time.Second); peak-low < 250 && time.Now().Before(deadline); {
		time.Sleep(250 * time.Millisecond)
		low = min(low, residentMiB(t, st.Session.PID))
	}
	t.Logf("QEMU resident after 400 MB freed in the guest: %d MiB, then %d MiB", peak, low)
	if peak-low < 250 {
		t.Errorf("the VM kept the memory its guest freed: %d MiB resident, %d MiB after 30 s", peak, low)
	}

	// 64 concurrent tasks, 8 MiB each, byte-exact in their logs.
	ctx := context.Background()
	var wg sync.WaitGroup
	ids := make([]string, 64)
	for i := range ids {
		wg.Go(func() {
			tk, err := s.client.Run(ctx, service.RunRequest{Shell: fmt.Sprintf("yes task-%02d | head -c 8388608", i)})
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = tk.ID
		})
	}
	wg.Wait()
	for i, id := range ids {
		if id == "" {
			continue
		}
		if tk := s.wait(id); tk.State != tasks.Exited || tk.Exit.Code != 0 {
			t.Fatalf("task %d: %+v", i, tk)
		}
		want := sha256.Sum256(bytes.Repeat([]byte(fmt.Sprintf("task-%02d\n", i)), 8<<20/8)[:8<<20])
		h := sha256.New()
		for off := int64(0); ; {
			chunks, next, err := s.client.Logs(ctx, id, off)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range chunks {
				h.Write(c.Data)
			}
			if len(chunks) == 0 {
				break
			}
			off = next
		}
		if got := h.Sum(nil); hex.EncodeToString(got) != hex.EncodeToString(want[:]) {
			t.Fatalf("task %d output differs", i)
		}
	}

	// kill -9 of QEMU under a running task: the task is lost, the VM returns.
	tk, err := s.client.Run(ctx, service.RunRequest{Shell: "echo started; sleep 600"})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		chunks, _, _ := s.client.Logs(ctx, tk.ID, 0)
		if len(chunks) > 0 {
			break
		}
		if i > 600 {
			t.Fatal("task never started")
		}
		time.Sleep(100 * time.Millisecond)
	}
	st, _ = s.client.Status(ctx)
	gen := st.Session.Generation
	if err := syscall.Kill(st.Session.PID, syscall.SIGKILL); err != nil {
		t.Fatalf("kill QEMU pid %d: %v", st.Session.PID, err)
	}
	if lost := s.wait(tk.ID); lost.State != tasks.Lost {
		t.Fatalf("task on a killed VM: %+v", lost)
	}
	if code, out, errOut := s.cli("", "run", "--", "echo", "back"); code != 0 || out != "back\n" {
		t.Fatalf("after the VM was killed: %d %q %q", code, out, errOut)
	}
	if st, _ = s.client.Status(ctx); st.Session.Generation <= gen {
		t.Fatalf("generation %d after a restart from %d", st.Session.Generation, gen)
	}

	// The host restarts: the history is still there.
	s.stop()
	if l := leftovers(ws); l != "" {
		t.Fatalf("processes left after airlock serve stopped: %s", l)
	}
	s = startServe(t, root)
	code, out, _ = s.cli("", "--json", "tasks")
	if code != 0 || !strings.Contains(out, tk.ID) || !strings.Contains(out, `"lost"`) {
		t.Fatalf("history after restart: %d %.300q", code, out)
	}
	code, out, _ = s.cli("", "logs", tk.ID)
	if code != 0 || out != "started\n" {
		t.Fatalf("log of the lost task after restart: %d %q", code, out)
	}
}
