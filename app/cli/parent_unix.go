//go:build !windows

package cli

import (
	"errors"
	"os"
	"syscall"
)

// watched is a process watchParent looks at.
type watched struct {
	pid      int
	isParent bool
}

func openProcess(pid int) (*watched, error) {
	w := &watched{pid: pid, isParent: os.Getppid() == pid}
	if !w.isParent && w.gone() {
		return nil, errors.New("no such process")
	}
	return w, nil
}

// gone says whether the process has ended: for the parent, that this
// process was re-parented; for another, that kill(pid, 0) finds no
// process (EPERM: it exists, another user's).
func (w *watched) gone() bool {
	if w.isParent {
		return os.Getppid() != w.pid
	}
	return errors.Is(syscall.Kill(w.pid, 0), syscall.ESRCH)
}

func (w *watched) close() {}
