//go:build linux

package agent

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// guardedDir is a temporary folder whose top the guard answers for,
// checking this process's opens too (as a task's).
func guardedDir(t testing.TB) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("fanotify permission events need root")
	}
	dir := t.TempDir()
	g, err := newTopGuard(dir)
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) {
		t.Skipf("no fanotify permission events here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	g.self = -1
	go g.serve()
	// The serving thread ends with the process; the mark goes with the
	// folder when the test removes it.
	return dir
}

// gone waits for the guard to remove p (after the refused open).
func gone(p string) error {
	var err error
	for range 100 {
		if _, err = os.Lstat(p); errors.Is(err, os.ErrNotExist) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err == nil {
		err = errors.New("still there")
	}
	return err
}

func TestTopGuardCreate(t *testing.T) {
	dir := guardedDir(t)
	for _, name := range topFiles {
		p := filepath.Join(dir, name)
		err := os.WriteFile(p, []byte("gitdir: elsewhere\n"), 0o644)
		if !errors.Is(err, unix.EPERM) {
			t.Errorf("write %s at the top: %v, want EPERM", name, err)
		}
		if err := gone(p); err != nil {
			t.Errorf("%s at the top after the refused open: %v, want it removed", name, err)
		}
	}
	// Everything else is ordinary work.
	for _, p := range []string{"x", ".gitignore", ".envrc.example", "sub/.envrc", "sub/.git"} {
		p = filepath.Join(dir, p)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Errorf("write %s: %v", p, err)
		}
		if _, err := os.ReadFile(p); err != nil {
			t.Errorf("read %s: %v", p, err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := os.ReadDir(dir); err != nil {
		t.Errorf("list the top: %v", err)
	}
}

// TestTopGuardExisting: a protected (read-only bound) .envrc is read as
// before; a writable one with content is not opened and keeps its
// content; one with a second name loses its top-level name.
func TestTopGuardExisting(t *testing.T) {
	dir := guardedDir(t)
	envrc := filepath.Join(dir, ".envrc")
	// Made before the guard would see it: through a link.
	if err := os.WriteFile(filepath.Join(dir, "sub-envrc"), []byte("use nix\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "sub-envrc"), filepath.Join(dir, "sub", "envrc")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "sub", "envrc"), envrc); err != nil {
		t.Fatal(err)
	}
	// Writable: refused, content kept (one name: not removed).
	if _, err := os.ReadFile(envrc); !errors.Is(err, unix.EPERM) {
		t.Errorf("read a writable .envrc: %v, want EPERM", err)
	}
	// Read-only bound onto itself as guardToolConfig does: read as before.
	fd, err := unix.Open(envrc, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_TYPE, &st); err != nil {
		t.Fatal(err)
	}
	if err := bindSelf(fd, &st, true); err != nil {
		unix.Close(fd)
		t.Skipf("no bind mounts here: %v", err)
	}
	unix.Close(fd)
	if b, err := os.ReadFile(envrc); err != nil || string(b) != "use nix\n" {
		t.Errorf("read a protected .envrc: %q, %v", b, err)
	}
	if err := unix.Unmount(envrc, unix.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	// A second name: the top-level one goes, the content stays.
	other := filepath.Join(dir, "sub", "other")
	if err := os.Link(envrc, other); err != nil {
		t.Fatal(err)
	}
	if _, err := os.ReadFile(envrc); !errors.Is(err, unix.EPERM) {
		t.Errorf("read a linked .envrc: %v, want EPERM", err)
	}
	if err := gone(envrc); err != nil {
		t.Errorf("a linked .envrc after the refused open: %v, want it removed", err)
	}
	// Its other name at the top opens it no more.
	if err := os.Link(other, filepath.Join(dir, "again")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.ReadFile(filepath.Join(dir, "again")); !errors.Is(err, unix.EPERM) {
		t.Errorf("read a refused .envrc by another top-level name: %v, want EPERM", err)
	}
	if b, err := os.ReadFile(other); err != nil || string(b) != "use nix\n" {
		t.Errorf("its other name: %q, %v", b, err)
	}
}

// BenchmarkTopOpen is the cost of an open at a guarded top (the kernel's
// question, the agent thread's fstat/fstatat/fstatfs, the answer) against
// the same open in an unmarked folder, in the same run.
func BenchmarkTopOpen(b *testing.B) {
	plain, guarded := b.TempDir(), guardedDir(b)
	per := map[string]time.Duration{}
	for _, d := range []struct{ name, dir string }{{"plain", plain}, {"guarded", guarded}} {
		p := filepath.Join(d.dir, "file")
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			b.Fatal(err)
		}
		b.Run(d.name, func(b *testing.B) {
			start := time.Now()
			for range b.N {
				fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
				if err != nil {
					b.Fatal(err)
				}
				unix.Close(fd)
			}
			per[d.name] = time.Since(start) / time.Duration(b.N)
		})
	}
	if per["plain"] > 0 {
		b.Logf("an open at the guarded top: %v, unmarked: %v (%.1fx)", per["guarded"], per["plain"], float64(per["guarded"])/float64(per["plain"]))
	}
}
