//go:build unix

package service

import (
	"io/fs"
	"syscall"
)

// allocated is what a file takes on disk: its blocks, so a sparse file
// counts what it holds rather than its length.
func allocated(fi fs.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int64(st.Blocks) * 512
	}
	return fi.Size()
}
