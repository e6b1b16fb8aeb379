//go:build unix

package changes

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestApplyAsRootGivesTheFolderOwner: Airlock run as root (a service, this
// machine's CI) writes into a user's folder; what Apply and Undo make
// there must be that user's, or the user (and the next task) cannot
// change it.
func TestApplyAsRootGivesTheFolderOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: only root can make a file another user's")
	}
	const uid, gid = 1000, 1000
	ws, dir := t.TempDir(), t.TempDir()
	s := openTestStore(t, dir, Options{})
	everyKind(t, ws, s)
	if err := filepath.Walk(ws, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	}); err != nil {
		t.Fatal(err)
	}
	owners := func(paths ...string) {
		t.Helper()
		for _, p := range paths {
			fi, err := os.Lstat(filepath.Join(ws, filepath.FromSlash(p)))
			if err != nil {
				t.Fatal(err)
			}
			if st := fi.Sys().(*syscall.Stat_t); st.Uid != uid || st.Gid != gid {
				t.Errorf("%s belongs to %d:%d, want the folder owner's %d:%d", p, st.Uid, st.Gid, uid, gid)
			}
		}
	}
	if _, err := s.Apply(ws, nil, ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	owners("added", "added/deep", "added/deep/new.txt", "mod.txt", "new-name.txt", "link")
	if _, err := s.Undo(ws, ""); err != nil {
		t.Fatal(err)
	}
	owners("mod.txt", "gone.txt", "tree", "tree/sub", "tree/sub/b.bin", "old-name.txt")
}

// TestLinkTimes: a link Apply makes has the time the guest gave it, and
// Undo gives back a replaced link its own time, not its target's.
func TestLinkTimes(t *testing.T) {
	ws, dir := t.TempDir(), t.TempDir()
	s := openTestStore(t, dir, Options{})
	makeHost(t, ws, wsFile{"a.txt", "a\n", 0o644})
	if err := os.Symlink("a.txt", filepath.Join(ws, "old")); err != nil {
		t.Fatal(err)
	}
	linkTime := oldTime.Add(-time.Hour)
	ts := []unix.Timespec{unix.NsecToTimespec(linkTime.UnixNano()), unix.NsecToTimespec(linkTime.UnixNano())}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, filepath.Join(ws, "old"), ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		t.Fatal(err)
	}
	base := baseOf(t, ws, "old")
	base.ModTime = linkTime
	setPending(t, s, nil,
		record{Entry: Entry{Path: "new", Kind: Added, Type: Symlink, Link: "a.txt", ModTime: newTime}},
		record{Entry: Entry{Path: "old", Kind: Deleted}, Base: base},
	)
	lt := func(p string) time.Time {
		fi, err := os.Lstat(filepath.Join(ws, p))
		if err != nil {
			t.Fatal(err)
		}
		return fi.ModTime()
	}
	if _, err := s.Apply(ws, nil, ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := lt("new"); !got.Equal(newTime) {
		t.Errorf("applied link's time %v, want %v", got, newTime)
	}
	if _, err := s.Undo(ws, ""); err != nil {
		t.Fatal(err)
	}
	if got := lt("old"); !got.Equal(linkTime) {
		t.Errorf("restored link's time %v, want %v", got, linkTime)
	}
	if got := lt("a.txt"); !got.Equal(oldTime) {
		t.Errorf("the link's target's time became %v, want %v", got, oldTime)
	}
}
