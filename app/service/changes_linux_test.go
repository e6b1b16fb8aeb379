package service

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/app/changes"
	"github.com/airlock-sandbox/airlock/app/tasks"
)

// heldWorld is a world whose workspace ws is held in mode: what its tasks
// write in w.upper is what the guest's layer holds.
func heldWorld(t *testing.T, mode changes.Mode) (*world, string) {
	t.Helper()
	w := newWorld(t)
	ws := filepath.Join(w.home, "ws")
	w.upper = filepath.Join(w.home, "upper")
	for _, d := range []string{ws, w.upper} {
		if err := os.Mkdir(d, 0o777); err != nil {
			t.Fatal(err)
		}
		os.Chmod(d, 0o777)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := w.service.SetWorkspace(ctx, ws, false, mode); err != nil {
		t.Fatal(err)
	}
	if st, _ := w.service.Settings(ctx); st.ChangesMode(ws) != mode {
		t.Fatalf("settings mode %s, want %s", st.ChangesMode(ws), mode)
	}
	return w, ws
}

// TestHeldChangesPulledBeforeFinish: in review mode, when a task is
// reported finished its writes are already pending (and a changes event
// said so), the folder is untouched, and a discard makes the running
// guest's layer forget them.
func TestHeldChangesPulledBeforeFinish(t *testing.T) {
	w, ws := heldWorld(t, changes.Review)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events, err := w.service.Events(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	task := w.run(RunRequest{Shell: "echo new > new.txt && mkdir d && echo x > d/f", Cwd: w.upper})
	if task.State != tasks.Exited || task.Exit.Code != 0 {
		out, errOut := w.output(task.ID)
		t.Fatalf("task %+v: %q %q", task, out, errOut)
	}
	l, err := w.service.Changes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]changes.Kind{}
	for _, e := range l.Entries {
		got[e.Path] = e.Kind
	}
	if l.Mode != changes.Review || got["new.txt"] != changes.Added || got["d/f"] != changes.Added {
		t.Fatalf("pending when the task finished: %+v", l)
	}
	if _, err := os.Stat(filepath.Join(ws, "new.txt")); err == nil {
		t.Fatal("new.txt reached the folder in review mode")
	}
	deadline := time.After(10 * time.Second)
	for seen := false; !seen; {
		select {
		case e := <-events:
			seen = e.Kind == "changes" && e.Pending != nil && *e.Pending == len(l.Entries)
		case <-deadline:
			t.Fatal("no changes event with the pending count")
		}
	}
	gone, err := w.service.Discard(ctx, []string{"new.txt"})
	if err != nil || len(gone) != 1 {
		t.Fatalf("discard: %v %v", gone, err)
	}
	if _, err := os.Stat(filepath.Join(w.upper, "new.txt")); err == nil {
		t.Error("the running guest's layer still holds the discarded new.txt")
	}
	if _, err := os.Stat(filepath.Join(w.upper, "d", "f")); err != nil {
		t.Errorf("d/f, still pending, left the layer: %v", err)
	}
}

// TestAutoAppliesWhenNoTaskRuns: in auto mode a task's writes wait while
// another task runs, and reach the folder, as one undoable checkpoint,
// before the last task is reported finished.
func TestAutoAppliesWhenNoTaskRuns(t *testing.T) {
	w, ws := heldWorld(t, changes.Auto)
	ctx := context.Background()
	long, err := w.service.Run(ctx, RunRequest{Shell: "while [ ! -e go ]; do sleep 0.05; done; echo late > late.txt", Cwd: w.upper})
	if err != nil {
		t.Fatal(err)
	}
	w.waitRunning(long.ID)
	w.run(RunRequest{Shell: "echo early > early.txt", Cwd: w.upper})
	if _, err := os.Stat(filepath.Join(ws, "early.txt")); err == nil {
		t.Fatal("early.txt was applied while another task ran")
	}
	if l, _ := w.service.Changes(ctx); len(l.Entries) != 1 || l.Entries[0].Path != "early.txt" {
		t.Fatalf("pending while another task runs: %+v", l.Entries)
	}
	w.run(RunRequest{Shell: "touch go", Cwd: w.upper})
	if tk, err := w.service.Wait(ctx, long.ID); err != nil || tk.State != tasks.Exited {
		t.Fatalf("long task: %+v %v", tk, err)
	}
	for name, want := range map[string]string{"early.txt": "early\n", "late.txt": "late\n"} {
		if b, err := os.ReadFile(filepath.Join(ws, name)); err != nil || string(b) != want {
			t.Errorf("%s when the last task finished: %q %v", name, b, err)
		}
	}
	if l, _ := w.service.Changes(ctx); len(l.Entries) != 0 {
		t.Errorf("pending after auto apply: %+v", l.Entries)
	}
	// The running guest forgot what was applied.
	if _, err := os.Stat(filepath.Join(w.upper, "early.txt")); err == nil {
		t.Error("the guest's layer still holds the applied early.txt")
	}
	cps, err := w.service.Checkpoints(ctx)
	if err != nil || len(cps.Checkpoints) == 0 {
		t.Fatalf("checkpoints: %+v %v", cps, err)
	}
	if _, err := w.service.Undo(ctx, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(ws, "late.txt")); err == nil {
		t.Error("late.txt is still in the folder after undo")
	}
}

// TestUserEditBetweenTasksIsNoConflict: a file the user edits while no
// task runs, and a later task then changes, is applied in auto mode: the
// layer held nothing, so the task started from the user's edit.
func TestUserEditBetweenTasksIsNoConflict(t *testing.T) {
	w, ws := heldWorld(t, changes.Auto)
	y := filepath.Join(ws, "y.txt")
	if err := os.WriteFile(y, []byte("v1\n"), 0o666); err != nil {
		t.Fatal(err)
	}
	slack := func() { time.Sleep(2500 * time.Millisecond) } // app/changes' clock slack
	slack()
	w.run(RunRequest{Shell: "echo x > x.txt", Cwd: w.upper})
	if _, err := os.Stat(filepath.Join(ws, "x.txt")); err != nil {
		t.Fatalf("x.txt was not applied: %v", err)
	}
	if err := os.WriteFile(y, []byte("v2\n"), 0o666); err != nil {
		t.Fatal(err)
	}
	slack()
	w.run(RunRequest{Shell: "printf 'v2\\nv3\\n' > y.txt", Cwd: w.upper})
	if b, _ := os.ReadFile(y); string(b) != "v2\nv3\n" {
		l, _ := w.service.Changes(context.Background())
		t.Fatalf("y.txt = %q, pending %+v: the user's edit before the task was taken for a conflict", b, l.Entries)
	}
}
