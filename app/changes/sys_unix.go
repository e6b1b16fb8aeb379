//go:build unix

package changes

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
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
