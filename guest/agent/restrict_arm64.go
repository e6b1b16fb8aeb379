//go:build linux

package agent

import "golang.org/x/sys/unix"

const (
	auditArch = unix.AUDIT_ARCH_AARCH64
	x32Bit    = 0 // no second ABI on the same numbers
	// sysSymlink, sysRename, sysLink: arm64 has only the *at calls.
	sysChmod    = -1
	sysSymlink  = -1
	sysRename   = -1
	sysLink     = -1
	sysMkdir    = -1
	sysRenameat = unix.SYS_RENAMEAT // beside renameat2, which newer architectures have alone
)

// legacyModeChecks: arm64 has only the *at calls.
var legacyModeChecks []modeCheck
