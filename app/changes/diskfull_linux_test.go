package changes

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// smallDisk mounts a 1 MiB tmpfs, where the test may (root on Linux).
func smallDisk(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount a small file system here: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}

// TestApplyRealDiskFull fills a real file system: the folder's while the
// new content is written, then the store's while the previous versions
// are kept. Either way the apply fails naming ENOSPC and the folder and
// the pending set are as they were.
func TestApplyRealDiskFull(t *testing.T) {
	big := strings.Repeat("x", 2<<20)
	t.Run("folder", func(t *testing.T) {
		ws := smallDisk(t)
		s := openTestStore(t, t.TempDir(), Options{})
		makeHost(t, ws, wsFile{"a", "old a", 0o644})
		setPending(t, s, []string{"new a", big}, fileRec(t, ws, "a", "new a", 0o644), fileRec(t, ws, "zbig", big, 0o644))
		old := snapshot(t, ws)
		_, err := s.Apply(ws, nil, ApplyOptions{})
		if !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("Apply: %v, want ENOSPC", err)
		}
		if d := diffSnap(old, snapshot(t, ws)); d != "" {
			t.Fatalf("folder changed:\n%s", d)
		}
		if p := pendingPaths(t, s); len(p) != 2 {
			t.Fatalf("pending %q", p)
		}
		if des, _ := os.ReadDir(filepath.Join(s.dir, checkpoints)); len(des) != 0 {
			t.Fatalf("checkpoints left: %v", des)
		}
	})
	t.Run("store", func(t *testing.T) {
		ws := t.TempDir()
		s := openTestStore(t, smallDisk(t), Options{})
		makeHost(t, ws, wsFile{"a", big[:600<<10], 0o644}, wsFile{"b", big[:600<<10], 0o644})
		setPending(t, s, []string{"1"}, fileRec(t, ws, "a", "1", 0o644), fileRec(t, ws, "b", "1", 0o644))
		old := snapshot(t, ws)
		if _, err := s.Apply(ws, nil, ApplyOptions{}); !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("Apply: %v, want ENOSPC", err)
		}
		if d := diffSnap(old, snapshot(t, ws)); d != "" {
			t.Fatalf("folder changed:\n%s", d)
		}
		if p := pendingPaths(t, s); len(p) != 2 {
			t.Fatalf("pending %q", p)
		}
	})
}
