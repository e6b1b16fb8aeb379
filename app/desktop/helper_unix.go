//go:build !windows

package desktop

import (
	"os"
	"os/exec"
	"syscall"
)

// helperProcAttr puts the helper in a process group of its own: a Ctrl-C
// in the terminal that started the app reaches the app, whose Quit stops
// the helper in order, and not the helper directly.
func helperProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// helperTerminate asks the helper to stop: airlock serve stops its VM and
// exits on SIGTERM.
func helperTerminate(p *os.Process) error { return p.Signal(syscall.SIGTERM) }
