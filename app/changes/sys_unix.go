//go:build unix

package changes

import (
	"errors"
	"syscall"
)

// noFollow opens a file without following a symlink in its last element.
const noFollow = syscall.O_NOFOLLOW

func isNotDir(err error) bool { return errors.Is(err, syscall.ENOTDIR) }
