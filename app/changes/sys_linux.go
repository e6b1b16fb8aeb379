package changes

import (
	"os"

	"golang.org/x/sys/unix"
)

// perFileSync is false where one syncfs(2) makes every file written so far
// on a file system durable, which costs one flush instead of one a file.
const perFileSync = false

// syncFS makes everything written to f's file system durable.
func syncFS(f *os.File) error { return unix.Syncfs(int(f.Fd())) }
