//go:build unix

package changes

import "syscall"

// noFollow opens a file without following a symlink in its last element.
const noFollow = syscall.O_NOFOLLOW
