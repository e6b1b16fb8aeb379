//go:build linux

package service

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/app/changes"
	"github.com/airlock-sandbox/airlock/app/settings"
	"github.com/airlock-sandbox/airlock/app/tasks"
)

func TestDiskUsage(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a"), make([]byte, 256<<10), 0o644)
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	os.WriteFile(filepath.Join(dir, "sub", "b"), make([]byte, 256<<10), 0o644)
	os.Symlink("/", filepath.Join(dir, "root")) // not followed
	sparse, _ := os.Create(filepath.Join(dir, "sparse"))
	sparse.Truncate(1 << 30) // a gigabyte long, nothing in it
	sparse.Close()
	used, err := diskUsage(context.Background(), dir, 1<<40)
	if err != nil {
		t.Fatal(err)
	}
	if used < 512<<10 || used > 1<<20 {
		t.Errorf("used %d bytes; want about 512 KiB (links not followed, holes not counted)", used)
	}
	if used, err := diskUsage(context.Background(), dir, 100<<10); err != nil || used <= 100<<10 {
		t.Errorf("with a limit: %d, %v; want past the limit, no error", used, err)
	}
	if _, err := diskUsage(context.Background(), filepath.Join(dir, "gone"), 1); err == nil {
		t.Error("a missing folder measured without an error")
	}
}

// A task writing past the workspace quota is ended with a reason that says
// so, and no task runs until the folder is back under the quota.
func TestWorkspaceQuota(t *testing.T) {
	old := quotaInterval
	quotaInterval = 50 * time.Millisecond
	t.Cleanup(func() { quotaInterval = old })
	w := newWorld(t)
	ws := filepath.Join(w.home, "ws")
	os.Mkdir(ws, 0o777)
	os.Chmod(ws, 0o777)
	st := settings.Default()
	st.Workspace, st.WorkspaceQuotaMiB = ws, 1
	// The quota bounds what reaches the folder as the guest writes it:
	// direct mode's (held changes are bounded by their store instead).
	st = st.WithChangesMode(ws, changes.Direct)
	if err := settings.Save(filepath.Join(w.dir, "settings.json"), st, settings.Validators{}); err != nil {
		t.Fatal(err)
	}
	w.service.Close(context.Background())
	w.open()

	task := w.run(RunRequest{Shell: "head -c 3000000 /dev/zero > big; sleep 60", Cwd: ws})
	if task.State != tasks.Killed || !strings.Contains(task.Reason, "quota of 1 MiB") {
		t.Fatalf("task over the quota: %+v", task)
	}
	ctx := context.Background()
	if _, err := w.service.Run(ctx, RunRequest{Shell: "true"}); !errors.Is(err, ErrOverQuota) || !strings.Contains(err.Error(), "free space") {
		t.Fatalf("Run over the quota: %v", err)
	}
	os.Remove(filepath.Join(ws, "big"))
	if task := w.run(RunRequest{Shell: "echo ok", Cwd: ws}); task.State != tasks.Exited {
		t.Fatalf("after freeing space: %+v", task)
	}
}
