//go:build unix

package changes

import (
	"fmt"
	"os"
	"path"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/printable"
)

// noFollow opens a file without following a symlink in its last element.
const noFollow = syscall.O_NOFOLLOW

// linkInto makes name in the open folder dir a hard link to the store's
// file src. Linking relative to the folder's descriptor, not by path,
// keeps it where Apply checked, whatever a parent folder became since.
func linkInto(dir *os.File, name, src string) error {
	return unix.Linkat(unix.AT_FDCWD, src, int(dir.Fd()), name, 0)
}

// linkOut makes the store's path dst a hard link to name in the open
// folder dir.
func linkOut(dir *os.File, name, dst string) error {
	return unix.Linkat(int(dir.Fd()), name, unix.AT_FDCWD, dst, 0)
}

// asFolderOwner gives p, which Apply or Undo just made in the folder
// root, to the folder's owner when Airlock runs as root: what a sandbox
// writes belongs to the user whose folder it is, as the share's own
// writes do in direct mode (vm/qemu serves the share with the folder
// owner's rights). As any other user it is that user's already.
func asFolderOwner(root *os.Root, p string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	fi, err := root.Stat(".")
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st.Uid == 0 {
		return nil
	}
	if err := root.Lchown(p, int(st.Uid), int(st.Gid)); err != nil {
		return fmt.Errorf("give %s to the folder's owner: %w", printable.String(p), err)
	}
	return nil
}

// setLinkTime sets the modification (and access) time of the symlink p
// itself: os.Root's Chtimes follows links. The time is set relative to
// the link's folder opened through root, so the call stays beneath it.
func setLinkTime(root *os.Root, p string, t time.Time) error {
	dir, err := root.Open(path.Dir(p))
	if err != nil {
		return err
	}
	defer dir.Close()
	ts := []unix.Timespec{unix.NsecToTimespec(t.UnixNano()), unix.NsecToTimespec(t.UnixNano())}
	if err := unix.UtimesNanoAt(int(dir.Fd()), path.Base(p), ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("set the time of the link %s: %w", printable.String(p), err)
	}
	return nil
}
