//go:build linux

package agent

import "golang.org/x/sys/unix"

const (
	auditArch = unix.AUDIT_ARCH_X86_64
	// x32Bit marks the x32 ABI's syscall numbers, which reach the same
	// calls under other numbers: refused.
	x32Bit = 0x40000000
	// sysSymlink, sysRename and sysLink are symlink(2), rename(2) and
	// link(2), beside the *at calls.
	sysChmod    = unix.SYS_CHMOD
	sysSymlink  = unix.SYS_SYMLINK
	sysRename   = unix.SYS_RENAME
	sysLink     = unix.SYS_LINK
	sysMkdir    = unix.SYS_MKDIR
	sysRenameat = unix.SYS_RENAMEAT // beside renameat2, which newer architectures have alone
)

// legacyModeChecks are the calls amd64 has beside the *at ones.
var legacyModeChecks = []modeCheck{
	{nr: unix.SYS_CHMOD, mode: 1, flags: -1, chmod: true},
	{nr: unix.SYS_OPEN, mode: 2, flags: 1},
	{nr: unix.SYS_CREAT, mode: 1, flags: -1},
	{nr: unix.SYS_MKNOD, mode: 1, flags: -1, node: true},
}
