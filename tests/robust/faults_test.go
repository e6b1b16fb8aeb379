//go:build e2e

package robust

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/app/changes"
	"github.com/airlock-sandbox/airlock/app/service"
	"github.com/airlock-sandbox/airlock/app/tasks"
	"github.com/airlock-sandbox/airlock/tests/internal/vmharness"
)

// agentCrash is a root task that crashes the guest agent: it runs in PID
// 1 (guest/boot), whose Go runtime, on a SIGABRT it does not handle, dumps
// its goroutines and exits, and the guest kernel panics (panic=-1 ends the
// VM). SIGKILL would do nothing: the kernel keeps it from PID 1.
const agentCrash = `kill -ABRT 1; sleep 60`

// TestFaults breaks one `airlock serve` in every way issue 8 lists, one
// after the other on the same service, and after each checks that the
// task's state is truthful, that the output received before the fault is
// all in its log, and that the next task works.
func TestFaults(t *testing.T) {
	root := t.TempDir()
	state := filepath.Join(root, "state")
	os.MkdirAll(state, 0o700)
	// The state folder on a small file system of its own, so the log
	// folder can be filled without filling the host.
	tmpfs := os.Getuid() == 0 && exec.Command("mount", "-t", "tmpfs", "-o", "size=64m,mode=0700", "tmpfs", state).Run() == nil
	if tmpfs {
		t.Cleanup(func() { exec.Command("umount", "-l", state).Run() })
	}
	ws := filepath.Join(root, "ws")
	os.Mkdir(ws, 0o755)
	ws = vmharness.OwnedByTaskUser(ws)
	s := startServe(t, root)
	// Direct mode: the faults here are the share's (the folder deleted
	// under the VM), and the state folder is a small file system that the
	// log-full fault fills, where a held workspace's layer disk lives.
	if err := s.client.SetWorkspace(t.Context(), ws, false, changes.Direct); err != nil {
		t.Fatal(err)
	}
	s.works("first boot")

	t.Run("QEMU killed mid-task", func(t *testing.T) {
		s.t = t
		tk := s.run(service.RunRequest{Shell: "yes qemu | head -c 1048576; sleep 600"})
		s.waitOutput(tk.ID, 1<<20)
		st := s.status()
		if err := syscall.Kill(st.Session.PID, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		end := s.wait(tk.ID)
		if end.State != tasks.Lost || !strings.Contains(end.Reason, "died") && !strings.Contains(end.Reason, "stopped") {
			t.Errorf("task on a killed VM: %s %q", end.State, end.Reason)
		}
		if !bytes.Equal(s.log(tk.ID), repeat("qemu", 1<<20)) {
			t.Errorf("the 1 MiB received before QEMU died is not all in the log")
		}
		t.Logf("%s: %s", end.State, end.Reason)
		s.works("after QEMU was killed")
		if after := s.status(); after.Session.Generation <= st.Session.Generation {
			t.Errorf("generation %d after %d", after.Session.Generation, st.Session.Generation)
		}
	})

	t.Run("agent crashed from inside", func(t *testing.T) {
		s.t = t
		before := s.status().Session
		victim := s.run(service.RunRequest{Shell: "yes agent | head -c 65536; sleep 600"})
		s.waitOutput(victim.ID, 65536)
		killer := s.run(service.RunRequest{Shell: agentCrash, Root: true})
		end, kend := s.wait(victim.ID), s.wait(killer.ID)
		if end.State != tasks.Lost || kend.State != tasks.Lost {
			t.Errorf("tasks whose agent crashed: victim %s %q, killer %s %q", end.State, end.Reason, kend.State, kend.Reason)
		}
		if !bytes.Equal(s.log(victim.ID), repeat("agent", 65536)) {
			t.Errorf("the output received before the agent crashed is not all in the log")
		}
		t.Logf("victim %s: %s", end.State, end.Reason)
		// The guest is gone with its agent; the service boots a new VM.
		s.works("after the agent crashed")
		if st := s.status().Session; st.Generation <= before.Generation {
			t.Errorf("generation %d after %d: the VM was not replaced", st.Generation, before.Generation)
		}
	})

	t.Run("VM frozen briefly", func(t *testing.T) {
		s.t = t
		st := s.status()
		tk := s.run(service.RunRequest{Shell: "echo before; sleep 3; echo after"})
		s.waitOutput(tk.ID, 7)
		syscall.Kill(st.Session.PID, syscall.SIGSTOP)
		time.Sleep(5 * time.Second) // under the health checks' 3 misses
		syscall.Kill(st.Session.PID, syscall.SIGCONT)
		end := s.wait(tk.ID)
		if out := string(s.log(tk.ID)); end.State != tasks.Exited || out != "before\nafter\n" {
			t.Errorf("task across a short freeze: %s %q %q", end.State, out, end.Reason)
		}
		if after := s.status(); after.Session.Generation != st.Session.Generation {
			t.Errorf("a 5 s freeze cost the VM (generation %d → %d): %s", st.Session.Generation, after.Session.Generation, after.Session.LastError)
		}
	})

	t.Run("VM frozen for good", func(t *testing.T) {
		s.t = t
		st := s.status()
		tk := s.run(service.RunRequest{Shell: "echo frozen; sleep 600", Timeout: 5 * time.Second})
		s.waitOutput(tk.ID, 7)
		syscall.Kill(st.Session.PID, syscall.SIGSTOP)
		defer syscall.Kill(st.Session.PID, syscall.SIGCONT)
		end := s.wait(tk.ID)
		switch {
		case end.State == tasks.TimedOut && strings.Contains(end.Reason, "did not end the task"):
		case end.State == tasks.Lost && strings.Contains(end.Reason, "stopped answering"):
		default:
			t.Errorf("task on a frozen VM: %s %q", end.State, end.Reason)
		}
		t.Logf("task on a frozen VM: %s: %s", end.State, end.Reason)
		if string(s.log(tk.ID)) != "frozen\n" {
			t.Errorf("the output received before the freeze is not in the log")
		}
		// Health reports it, and the session replaces the VM.
		for i := 0; ; i++ {
			now := s.status()
			if now.Session.Restarts > st.Session.Restarts && strings.Contains(now.Session.LastError, "stopped answering") {
				t.Logf("status: %s, %s", now.Session.State, now.Session.LastError)
				break
			}
			if i > 1200 {
				t.Fatalf("the frozen VM was never reported: %+v", now.Session)
			}
			time.Sleep(100 * time.Millisecond)
		}
		s.works("after a frozen VM")
		if after := s.status(); after.Session.Generation <= st.Session.Generation {
			t.Errorf("generation %d after a freeze of %d", after.Session.Generation, st.Session.Generation)
		}
	})

	t.Run("log folder full", func(t *testing.T) {
		s.t = t
		if !tmpfs {
			t.Skip("needs root to mount a small file system for the state folder")
		}
		var fs syscall.Statfs_t
		syscall.Statfs(state, &fs)
		free := int64(fs.Bavail) * fs.Bsize
		filler := filepath.Join(state, "filler")
		if err := os.WriteFile(filler, make([]byte, free-(256<<10)), 0o600); err != nil {
			t.Fatal(err)
		}
		const n = 4 << 20
		tk := s.wait(s.run(service.RunRequest{Shell: fmt.Sprintf("yes full | head -c %d", n)}).ID)
		if tk.State != tasks.Exited || tk.Exit.Code != 0 || tk.Output.Dropped == 0 || !strings.Contains(tk.Output.Error, "no space") {
			t.Errorf("task whose log filled the disk: %s %+v %+v", tk.State, tk.Exit, tk.Output)
		}
		// Writes that failed are dropped whole and later ones may fit again,
		// so the log holds some of the output, only output, and the task
		// counts the rest as dropped.
		if kept := s.log(tk.ID); len(bytes.Trim(kept, "ful\n")) != 0 || int64(len(kept))+tk.Output.Dropped != n {
			t.Errorf("log of %d bytes and %d dropped, of %d", len(kept), tk.Output.Dropped, n)
		}
		t.Logf("disk full: %s, %d bytes stored, %d dropped, error %q", tk.State, tk.Output.Stdout, tk.Output.Dropped, tk.Output.Error)
		os.Remove(filler)
		s.works("after the log folder had room again")
	})

	t.Run("workspace deleted while shared", func(t *testing.T) {
		s.t = t
		os.WriteFile(filepath.Join(ws, "kept.txt"), []byte("x"), 0o644)
		if err := os.RemoveAll(ws); err != nil {
			t.Fatal(err)
		}
		tk := s.wait(s.run(service.RunRequest{Shell: "ls /workspace; echo new > /workspace/new.txt"}).ID)
		if tk.State != tasks.Exited || tk.Exit.Code == 0 {
			t.Errorf("task in a deleted workspace: %s %+v %q", tk.State, tk.Exit, s.log(tk.ID))
		}
		if _, err := os.Stat(ws); err == nil {
			t.Errorf("the guest recreated the deleted workspace on the host")
		}
		t.Logf("task in a deleted workspace: %s %+v %q", tk.State, tk.Exit, s.log(tk.ID))
		s.works("with the workspace deleted")
		os.Mkdir(ws, 0o755)
		vmharness.OwnedByTaskUser(ws)
		if err := s.client.SetWorkspace(t.Context(), ws, false, changes.Direct); err != nil {
			t.Fatal(err)
		}
		tk = s.wait(s.run(service.RunRequest{Shell: "echo back > /workspace/back.txt"}).ID)
		if b, _ := os.ReadFile(filepath.Join(ws, "back.txt")); tk.State != tasks.Exited || string(b) != "back\n" {
			t.Errorf("the workspace set again: %s %q", tk.State, b)
		}
	})

	t.Run("service killed and restarted", func(t *testing.T) {
		s.t = t
		running := s.run(service.RunRequest{Shell: "yes host | head -c 65536; sleep 600"})
		s.waitOutput(running.ID, 65536)
		qemu := s.status().Session.PID
		before, _ := s.client.Tasks(t.Context())
		s.kill()
		// QEMU dies with the service that started it.
		for i := 0; syscall.Kill(qemu, 0) == nil; i++ {
			if i > 300 {
				t.Fatalf("QEMU (pid %d) outlived the killed service", qemu)
			}
			time.Sleep(100 * time.Millisecond)
		}
		s = startServe(t, root)
		s.t = t
		after, err := s.client.Tasks(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		byID := map[string]tasks.Task{}
		for _, tk := range after {
			byID[tk.ID] = tk
		}
		for _, b := range before {
			a, ok := byID[b.ID]
			switch {
			case !ok:
				t.Errorf("task %s is gone after the restart", b.ID)
			case b.ID == running.ID:
				if a.State != tasks.Lost || a.Reason == "" {
					t.Errorf("the task running when the service died: %s %q", a.State, a.Reason)
				}
				t.Logf("the task running when the service died: %s: %s", a.State, a.Reason)
			case a.State != b.State || a.Exit != b.Exit || a.Output.Stdout != b.Output.Stdout:
				t.Errorf("task %s changed across the restart: %s %+v %d → %s %+v %d", b.ID, b.State, b.Exit, b.Output.Stdout, a.State, a.Exit, a.Output.Stdout)
			}
		}
		if !bytes.Equal(s.log(running.ID), repeat("host", 65536)) {
			t.Errorf("the output received before the service died is not all in the log")
		}
		s.works("after the service restarted")
	})
}
