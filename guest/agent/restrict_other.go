//go:build linux && !amd64 && !arm64

package agent

// No filter is written for other architectures: tasks there run without
// one (newTaskRules says so).
const (
	auditArch   = 0
	x32Bit      = 0
	sysRename   = -1
	sysLink     = -1
	sysMkdir    = -1
	sysRenameat = -1 // riscv64 and loong64 have renameat2 alone
	sysChmod    = -1
	sysSymlink  = -1
)

var legacyModeChecks []modeCheck
