package changes

import (
	"io/fs"
	"syscall"
)

// identity is a file's inode and change time: both change whenever
// anything writes, renames over, chmods or links the file, and no user
// tool sets them back.
func identity(fi fs.FileInfo) (ino uint64, ctime int64) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0
	}
	return uint64(st.Ino), st.Ctimespec.Nano()
}

// linkCount is how many names the file has; 0 when unknown.
func linkCount(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Nlink)
	}
	return 0
}
