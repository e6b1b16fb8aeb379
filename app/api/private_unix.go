//go:build !windows

package api

import (
	"fmt"
	"os"
	"syscall"
)

// checkPrivate refuses a socket folder that another user owns or can enter.
func checkPrivate(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("api: socket folder: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if ok && int(st.Uid) != os.Getuid() {
		return fmt.Errorf("api: socket folder %s belongs to uid %d, not to you", dir, st.Uid)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("api: socket folder %s is open to others: %w", dir, err)
		}
	}
	return nil
}
