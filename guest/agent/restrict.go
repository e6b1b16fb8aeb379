//go:build linux

package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// What a task writes into the shared folder reaches the host's disk as the
// folder's owner (9p and virtiofs serve the guest's modes and file types),
// where the user's own programs may later open or run it. So every task,
// root's too, runs under two restrictions the agent puts on the thread it
// forks the task from; the child inherits both, and no task can lift them:
//
//   - a seccomp filter: no setuid or setgid bit from the mode of a file
//     open, creat or mknod create, anywhere (EPERM: programs create, then
//     chmod), nor from chmod, fchmod, fchmodat or fchmodat2 in the
//     workspace: the agent looks at where the file is (symlink.go) and
//     does the chmod for the task elsewhere (dpkg's setuid programs); no
//     io_uring (its operations bypass the filter) and no openat2 (its
//     mode is behind a pointer the filter cannot read): ENOSYS, which
//     programs take for an older kernel and fall back from. mkdir
//     needs no check: the kernel drops those bits from its mode;
//   - a Landlock domain that refuses FIFOs, sockets and device nodes beneath
//     the workspace only (EACCES), so that nothing a host program would
//     hang on or talk to appears in the user's folder, while unix sockets
//     and FIFOs in /tmp keep working. Without Landlock (a kernel built
//     without it), and for guest root's tasks (taskRules.forRoot), the
//     filter refuses every mknod but a regular file's, everywhere,
//     instead; bind(2) of a unix socket is then not refused.
//
// The filter also hands symlink calls to the agent, which checks their
// targets in the workspace (symlink.go), rename and hard link calls,
// which it checks for links moved out of it, and, in direct mode, mkdir
// calls, for the tool configuration's names (rename.go). Without a shared folder tasks run
// without any of it: nothing they write reaches the host.
//
// World-writable modes are not refused: a filter that cannot see paths or
// the umask cannot tell `umask 0; mkdir d` from any other mkdir without
// breaking programs, and such a mode is no code the host runs.

// buildRules builds the rules for this agent's tasks, at the first task
// (after init mounted the workspace). What the kernel lacks is logged;
// a task without the rules is not started.
func (s *Server) buildRules() (taskRules, error) {
	ws := ""
	if s.workspaceMounted() {
		ws = s.cfg.WorkspaceDir
	}
	r, noLandlock, err := newTaskRules(ws, s.cfg.RefuseToolNames)
	if noLandlock != nil {
		s.log.Warn("no Landlock: FIFOs, sockets and device nodes are refused by mknod everywhere, and unix sockets can be bound in the workspace", "err", noLandlock)
	}
	if err != nil && auditArch == 0 {
		s.log.Warn("tasks run without a seccomp filter", "err", err)
		return r, nil
	}
	return r, err
}

// taskRules is what restrictTask applies: built once per agent (the
// workspace does not move), applied to the thread of each task's fork.
type taskRules struct {
	filter []unix.SockFilter
	// ruleset is the Landlock ruleset's descriptor, or -1 without
	// Landlock (or without a workspace to guard).
	ruleset int
	// links, when set, has the filter hand symlink, rename and link
	// calls, and chmod calls with setuid or setgid bits, to the agent
	// (symlink.go, rename.go), which guards the workspace ws.
	links bool
	ws    wsIdentity
	// rootFilter is the filter for root's tasks when ruleset is set: it
	// refuses special files everywhere instead, so that root's tasks need
	// no Landlock domain (see forRoot).
	rootFilter []unix.SockFilter
}

// forRoot is r for a task that runs as guest root. A Landlock domain also
// keeps its tasks from reading the memory of processes outside it
// (ptrace's read checks), the agent's among them; root asks for the whole
// guest, debugging and the e2e scan that proves no secret's value is in
// the guest's memory included. So root's tasks get no domain, and the
// filter refuses every mknod but a regular file's in its place, as on a
// kernel without Landlock: nothing special reaches the folder either way.
func (r taskRules) forRoot() taskRules {
	if r.ruleset < 0 {
		return r
	}
	r.ruleset, r.filter = -1, r.rootFilter
	return r
}

// landlockSpecial are the Landlock rights the workspace lacks: making
// device nodes, FIFOs and unix sockets.
const landlockSpecial = unix.LANDLOCK_ACCESS_FS_MAKE_CHAR | unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK |
	unix.LANDLOCK_ACCESS_FS_MAKE_FIFO | unix.LANDLOCK_ACCESS_FS_MAKE_SOCK

// newTaskRules builds the rules for tasks beside workspace ("" when no
// folder is shared); toolNames has the agent refuse the tool
// configuration's names at its top (RefuseToolNames). A kernel without Landlock (or with only its first
// version, which refuses every rename between folders) is no error:
// noLandlock says why, and the filter then refuses special files
// everywhere.
func newTaskRules(workspace string, toolNames bool) (r taskRules, noLandlock error, err error) {
	r.ruleset = -1
	if workspace == "" {
		return r, nil, nil // nothing a task writes reaches the host
	}
	var st unix.Stat_t
	if err := unix.Stat(workspace, &st); err != nil {
		return r, nil, fmt.Errorf("workspace: %w", err)
	}
	r.links, r.ws = true, wsIdentity{dev: st.Dev, ino: st.Ino, toolNames: toolNames}
	if err := openLinkLock(); err != nil {
		return r, nil, fmt.Errorf("the links' lock %s: %w", linkLockPath, err)
	}
	r.ruleset, noLandlock = landlockRuleset(workspace)
	r.filter, err = taskFilter(r.ruleset < 0, toolNames)
	if err == nil && r.ruleset >= 0 {
		r.rootFilter, err = taskFilter(true, toolNames)
	}
	if err != nil && r.ruleset >= 0 {
		unix.Close(r.ruleset)
		r.ruleset = -1
	}
	return r, noLandlock, err
}

// restrictTask restricts the calling thread, which must be locked to its
// goroutine and never run another (whatever it forks inherits the
// restrictions): no_new_privs, then r's Landlock domain and seccomp
// filter. It touches no state but the thread's, so it serves any process
// that forks tasks. With r.links it returns the filter's listener, which
// serveCalls must serve (or the tasks' symlink calls wait), else -1.
func restrictTask(r taskRules) (listener int, err error) {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return -1, fmt.Errorf("prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	if r.ruleset >= 0 {
		if _, _, e := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(r.ruleset), 0, 0); e != 0 {
			return -1, fmt.Errorf("landlock_restrict_self: %w", e)
		}
	}
	if len(r.filter) == 0 {
		return -1, nil
	}
	prog := unix.SockFprog{Len: uint16(len(r.filter)), Filter: &r.filter[0]}
	// Without SECCOMP_FILTER_FLAG_TSYNC: this thread only.
	var flags uintptr
	if r.links {
		flags = unix.SECCOMP_FILTER_FLAG_NEW_LISTENER
	}
	fd, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&prog)))
	if e != 0 {
		return -1, fmt.Errorf("seccomp: %w", e)
	}
	if !r.links {
		return -1, nil
	}
	unix.CloseOnExec(int(fd))
	return int(fd), nil
}

// landlockRuleset makes a ruleset that grants landlockSpecial beneath
// everything but workspace: for each folder from / down to it, beneath
// every entry but the next one on the way. Paths made later, and the
// folders on the way themselves (/ for /workspace), are not granted.
// Reparenting (LANDLOCK_ACCESS_FS_REFER), which a ruleset denies unless
// it grants it, is granted beneath /.
func landlockRuleset(workspace string) (int, error) {
	abi, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	switch {
	case e != 0:
		return -1, fmt.Errorf("landlock: %w", e)
	case abi < 2:
		return -1, fmt.Errorf("landlock: version %d refuses every rename between folders", abi)
	}
	workspace = filepath.Clean(workspace)
	if !filepath.IsAbs(workspace) || workspace == "/" {
		return -1, fmt.Errorf("landlock: %q is no folder to guard", workspace)
	}
	attr := struct{ handledFS uint64 }{landlockSpecial | unix.LANDLOCK_ACCESS_FS_REFER}
	fd, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr), 0)
	if e != 0 {
		return -1, fmt.Errorf("landlock_create_ruleset: %w", e)
	}
	rs := int(fd)
	unix.CloseOnExec(rs)
	if err := landlockGrant(rs, "/", unix.LANDLOCK_ACCESS_FS_REFER); err != nil {
		unix.Close(rs)
		return -1, err
	}
	dir := "/"
	for _, next := range strings.Split(strings.TrimPrefix(workspace, "/"), "/") {
		ents, err := os.ReadDir(dir)
		if err != nil {
			unix.Close(rs)
			return -1, fmt.Errorf("landlock: %w", err)
		}
		for _, ent := range ents {
			if ent.Name() == next || !ent.IsDir() {
				continue
			}
			// A folder that went away, or one root cannot open (a 9p or
			// FUSE mount's), is simply not granted.
			_ = landlockGrant(rs, filepath.Join(dir, ent.Name()), landlockSpecial)
		}
		dir = filepath.Join(dir, next)
	}
	return rs, nil
}

func landlockGrant(ruleset int, dir string, access uint64) error {
	pfd, err := unix.Open(dir, unix.O_PATH|unix.O_CLOEXEC|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("landlock: %s: %w", dir, err)
	}
	defer unix.Close(pfd)
	// The kernel's struct is packed: 12 bytes, the prefix of this one.
	rule := unix.LandlockPathBeneathAttr{Allowed_access: access, Parent_fd: int32(pfd)}
	if _, _, e := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(ruleset), unix.LANDLOCK_RULE_PATH_BENEATH,
		uintptr(unsafe.Pointer(&rule)), 0, 0, 0); e != 0 {
		return fmt.Errorf("landlock_add_rule %s: %w", dir, e)
	}
	return nil
}

// Modes and flags the filter looks at.
const (
	setID        = unix.S_ISUID | unix.S_ISGID
	openCreate   = unix.O_CREAT | 0o20000000 // O_CREAT, __O_TMPFILE
	sysFchmodat2 = 452                       // the same on every architecture
)

// seccomp_data: nr, arch, instruction pointer, then six 64-bit arguments,
// of which the filter reads the low (little-endian: first) 32 bits.
const (
	offNr   = 0
	offArch = 4
)

func offArg(i int) uint32 { return 16 + 8*uint32(i) }

var (
	retAllow  = bpf.RetConstant{Val: unix.SECCOMP_RET_ALLOW}
	retEPERM  = bpf.RetConstant{Val: unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM)}
	retENOSYS = bpf.RetConstant{Val: unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)}
	retNotify = bpf.RetConstant{Val: unix.SECCOMP_RET_USER_NOTIF}
)

// modeCheck is one syscall whose mode argument the filter checks.
type modeCheck struct {
	nr   uint32
	mode int // index of the mode argument
	// flags, when >= 0, is the index of open's flags: the mode counts
	// only when they create a file.
	flags int
	// node: mknod, whose file type the filter also checks when
	// special files are refused everywhere.
	node bool
	// chmod: the agent decides (symlink.go), as the bits are refused
	// in the workspace only; a create's are refused everywhere.
	chmod bool
}

// taskFilter assembles the seccomp filter. noSpecial refuses mknod of
// anything but a regular file (no Landlock to refuse them in the
// workspace only). symlink, rename and link calls, and chmod calls that
// set a setuid or setgid bit, go to the agent's listener; with mkdirs,
// mkdir calls too (RefuseToolNames).
func taskFilter(noSpecial, mkdirs bool) ([]unix.SockFilter, error) {
	if auditArch == 0 {
		return nil, errors.New("seccomp: no filter for this architecture")
	}
	prog := []bpf.Instruction{
		bpf.LoadAbsolute{Off: offArch, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: auditArch, SkipTrue: 1},
		retENOSYS, // another ABI's calls (i386 on amd64)
		bpf.LoadAbsolute{Off: offNr, Size: 4},
	}
	if x32Bit != 0 {
		prog = append(prog, bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: x32Bit, SkipFalse: 1}, retENOSYS)
	}
	for _, nr := range []uint32{unix.SYS_IO_URING_SETUP, unix.SYS_OPENAT2} {
		prog = append(prog, bpf.JumpIf{Cond: bpf.JumpEqual, Val: nr, SkipFalse: 1}, retENOSYS)
	}
	notify := []int{unix.SYS_SYMLINKAT, sysSymlink, sysRenameat, unix.SYS_RENAMEAT2, sysRename, unix.SYS_LINKAT, sysLink}
	if mkdirs {
		notify = append(notify, unix.SYS_MKDIRAT, sysMkdir)
	}
	for _, nr := range notify {
		if nr >= 0 {
			prog = append(prog, bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(nr), SkipFalse: 1}, retNotify)
		}
	}
	checks := append(slices.Clip(legacyModeChecks),
		modeCheck{nr: unix.SYS_FCHMOD, mode: 1, flags: -1, chmod: true},
		modeCheck{nr: unix.SYS_FCHMODAT, mode: 2, flags: -1, chmod: true},
		modeCheck{nr: sysFchmodat2, mode: 2, flags: -1, chmod: true},
		modeCheck{nr: unix.SYS_OPENAT, mode: 3, flags: 2},
		modeCheck{nr: unix.SYS_MKNODAT, mode: 2, flags: -1, node: true},
	)
	for _, c := range checks {
		prog = append(prog, c.block(noSpecial)...)
	}
	prog = append(prog, retAllow)
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	out := make([]unix.SockFilter, len(raw))
	for i, in := range raw {
		out[i] = unix.SockFilter{Code: in.Op, Jt: in.Jt, Jf: in.Jf, K: in.K}
	}
	return out, nil
}

// block is the filter's code for c. It starts with the syscall number in
// A and either returns or, for another syscall, skips to its end with A
// untouched.
func (c modeCheck) block(noSpecial bool) []bpf.Instruction {
	var body []bpf.Instruction
	if c.flags >= 0 {
		body = append(body,
			bpf.LoadAbsolute{Off: offArg(c.flags), Size: 4},
			bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: openCreate, SkipFalse: 3}, // to retAllow
		)
	}
	if c.node && noSpecial {
		body = append(body,
			bpf.LoadAbsolute{Off: offArg(c.mode), Size: 4},
			bpf.ALUOpConstant{Op: bpf.ALUOpAnd, Val: unix.S_IFMT},
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0, SkipTrue: 2},
			bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.S_IFREG, SkipTrue: 1},
			retEPERM,
		)
	}
	refuse := retEPERM
	if c.chmod {
		refuse = retNotify
	}
	body = append(body,
		bpf.LoadAbsolute{Off: offArg(c.mode), Size: 4},
		bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: setID, SkipFalse: 1},
		refuse,
		retAllow,
	)
	return append([]bpf.Instruction{
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: c.nr, SkipFalse: uint8(len(body))},
	}, body...)
}
