//go:build !windows

package workspace

import (
	"os"
	"syscall"
)

// Owner returns the uid and gid that own dir, so the guest's task user can
// be given the same ids and files it writes belong to the folder's owner.
// It returns 0, 0 when they cannot be read.
func Owner(dir string) (uid, gid uint32) {
	fi, err := os.Stat(dir)
	if err != nil {
		return 0, 0
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Uid, st.Gid
	}
	return 0, 0
}
