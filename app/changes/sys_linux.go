package changes

import (
	"io/fs"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// perFileSync is false where one syncfs(2) makes every file written so far
// on a file system durable, which costs one flush instead of one a file.
const perFileSync = false

// syncFS makes everything written to f's file system durable.
func syncFS(f *os.File) error { return unix.Syncfs(int(f.Fd())) }

// identity is a file's inode and change time: both change whenever
// anything writes, renames over, chmods or links the file, and no user
// tool sets them back.
func identity(fi fs.FileInfo) (ino uint64, ctime int64) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0
	}
	return uint64(st.Ino), st.Ctim.Nano()
}

// linkCount is how many names the file has; 0 when unknown.
func linkCount(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Nlink)
	}
	return 0
}
