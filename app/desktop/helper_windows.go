package desktop

import (
	"os"
	"os/exec"
)

// helperProcAttr does nothing: the Windows app runs no helper (RunsHelper).
func helperProcAttr(*exec.Cmd) {}

// helperTerminate kills the helper: Windows has no signal to ask a console
// program to stop, and the Windows app runs no helper (RunsHelper).
func helperTerminate(p *os.Process) error { return p.Kill() }
