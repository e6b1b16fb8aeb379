//go:build linux

package agent

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Moves and hard links in the workspace. A link is checked where it is
// made (symlink.go): `a/b/l -> ../../x` stays inside from a/b. Moved
// towards the top, by itself or in a folder (rename, renameat,
// renameat2), or given a second name there (link, linkat: a hard link to
// a link, as linkat makes without AT_SYMLINK_FOLLOW), it climbs out. Only
// a move to a shallower folder can do that: a link whose `..`s fit the
// depth of its folder fits any deeper one.
//
// So the filter hands those calls to the agent too, which does each for
// the task as it does symlink: strings read from the task's memory,
// folders opened with the task's credentials, the call made with them,
// never let through (the task's memory can change after the check). In
// the workspace a move between folders is refused with EXDEV when:
//
//   - the moved link would not stay inside from its new folder;
//   - a folder moves to a shallower one and a link in it (a walk of at
//     most maxMoveWalk entries, maxMoveDepth folders deep, with the
//     task's credentials) would then climb out, or its target is
//     absolute or has a `..` after a name (only the host makes those
//     there), or the walk reaches its bound or a folder it cannot read.
//
// EXDEV, the error of a move between file systems, because programs
// expect it of rename: mv, Python's shutil.move and npm's move-file then
// copy instead, and the copy makes each link again through the checked
// symlink call, where only the links that would climb out are refused,
// each with its own EPERM. EPERM here would end those moves without the
// fallback, for the whole folder. For link it is the error of a second
// name on another file system, which ln reports as it is.
//
// Making links and checked moves hold one lock (lockLinks: a mutex in a
// process, flock(2) on linkLockPath among the agent and the task inits):
// without it a task could make a link in a folder, or move one into it,
// between the walk and the move.
//
// Moves within one folder (git's and npm's lock and temporary files),
// and moves outside the workspace, are done without a check, but still
// by the agent. The cost (BenchmarkRename, on a host kernel): ~28 µs a
// rename against ~3 µs for a plain one, 8-10 times, the same within a
// folder and between two: the notification's round trip and the call's
// strings, credentials and folders, not the check.

const (
	// maxMoveWalk bounds how many entries a checked move looks at.
	maxMoveWalk = 20000
	// maxMoveDepth bounds how deep a checked move looks, and how far
	// the agent climbs to find a folder's depth in the workspace.
	maxMoveDepth = 512
)

// linkLockPath is the file whose lock serialises making links and checked
// moves across the processes that serve tasks' calls: root's only (its
// folder is 0700).
var linkLockPath = "/run/airlock/links.lock"

// links is this process's hold on the lock: a mutex among its own
// listeners' goroutines, and flock(2) on its own open file among
// processes.
var links struct {
	mu   sync.Mutex
	once sync.Once
	fd   int
	err  error
}

// openLinkLock opens the links' lock file, once per process; newTaskRules
// calls it, so no task starts that the lock would not cover.
func openLinkLock() error {
	links.once.Do(func() {
		links.fd = -1
		if err := os.MkdirAll(filepath.Dir(linkLockPath), 0o700); err != nil {
			links.err = err
			return
		}
		links.fd, links.err = unix.Open(linkLockPath, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o600)
	})
	return links.err
}

// lockLinks takes the links' lock and returns its release.
func lockLinks() func() {
	_ = openLinkLock() // opened by newTaskRules; without the file, -1
	links.mu.Lock()
	fd := links.fd
	if fd >= 0 {
		for unix.Flock(fd, unix.LOCK_EX) == unix.EINTR {
		}
	}
	return func() {
		if fd >= 0 {
			_ = unix.Flock(fd, unix.LOCK_UN)
		}
		links.mu.Unlock()
	}
}

// taskPath is a path of a task's call split into its folder (opened, with
// the task's credentials) and its last name.
type taskPath struct {
	dfd   int
	name  string
	slash bool // written with a trailing slash: must be a folder
}

// splitTaskPath opens path's folder as the task pid resolves it from
// dirfd. name is "" for a path that is only slashes.
func (c *callCtx) splitTaskPath(pid uint32, dirfd int32, path string) (taskPath, unix.Errno) {
	p := taskPath{dfd: -1}
	if path == "" {
		return p, unix.ENOENT
	}
	trimmed := strings.TrimRight(path, "/")
	p.slash = len(trimmed) < len(path)
	dir, name := ".", trimmed
	if i := strings.LastIndexByte(trimmed, '/'); i >= 0 {
		dir, name = trimmed[:i+1], trimmed[i+1:]
	} else if trimmed == "" {
		dir = "/"
	}
	p.name = name
	dfd, errno := c.taskDir(pid, dirfd, dir)
	if errno != 0 {
		return p, errno
	}
	p.dfd = dfd
	return p, 0
}

func (p taskPath) close() {
	if p.dfd >= 0 {
		unix.Close(p.dfd)
	}
}

// renameFor does the task's rename call req, or refuses it; with the
// task's credentials (asTask), but for the links' lock, whose descriptor
// is open already.
func (c *callCtx) renameFor(req *seccompNotif) unix.Errno {
	a := req.Data.Args
	odir, ndir := int32(unix.AT_FDCWD), int32(unix.AT_FDCWD)
	var opath, npath uint64
	var flags uint32
	switch nr := int(req.Data.Nr); {
	case nr == unix.SYS_RENAMEAT2:
		flags = uint32(a[4])
		odir, opath, ndir, npath = int32(a[0]), a[1], int32(a[2]), a[3]
	case nr == sysRenameat:
		odir, opath, ndir, npath = int32(a[0]), a[1], int32(a[2]), a[3]
	case nr == sysRename:
		opath, npath = a[0], a[1]
	default:
		return unix.ENOSYS
	}
	paths, err := readStrings(req.PID, opath, npath)
	if err != nil {
		return errnoOf(err, unix.EFAULT)
	}
	oldp, newp := paths[0], paths[1]
	from, errno := c.splitTaskPath(req.PID, odir, oldp)
	defer from.close()
	if errno != 0 {
		return errno
	}
	to, errno := c.splitTaskPath(req.PID, ndir, newp)
	defer to.close()
	if errno != 0 {
		return errno
	}
	for _, n := range []string{from.name, to.name} {
		if n == "" || n == "." || n == ".." {
			return unix.EBUSY
		}
	}
	if !c.stillWaiting(req) {
		return unix.ENOENT
	}
	unlock := lockLinks()
	defer unlock()
	if from.slash || to.slash {
		// The names are given without their slashes: a slash says the
		// moved thing is a folder.
		var st unix.Stat_t
		if unix.Fstatat(from.dfd, from.name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return unix.ENOTDIR
		}
	}
	if c.toolName(to.dfd, to.name) || flags&unix.RENAME_EXCHANGE != 0 && c.toolName(from.dfd, from.name) {
		return unix.EPERM
	}
	if errno := c.moveAllowed(from, to); errno != 0 {
		return errno
	}
	if flags&unix.RENAME_EXCHANGE != 0 {
		if errno := c.moveAllowed(to, from); errno != 0 {
			return errno
		}
	}
	return errnoOf(unix.Renameat2(from.dfd, from.name, to.dfd, to.name, uint(flags)), unix.EIO)
}

// linkFor does the task's hard link call req, or refuses it, as
// renameFor.
func (c *callCtx) linkFor(req *seccompNotif) unix.Errno {
	a := req.Data.Args
	odir, ndir := int32(unix.AT_FDCWD), int32(unix.AT_FDCWD)
	var opath, npath uint64
	var flags int
	switch nr := int(req.Data.Nr); {
	case nr == unix.SYS_LINKAT:
		odir, opath, ndir, npath, flags = int32(a[0]), a[1], int32(a[2]), a[3], int(int32(a[4]))
	case nr == sysLink:
		opath, npath = a[0], a[1]
	default:
		return unix.ENOSYS
	}
	if flags&^(unix.AT_SYMLINK_FOLLOW|unix.AT_EMPTY_PATH) != 0 {
		return unix.EINVAL
	}
	paths, err := readStrings(req.PID, opath, npath)
	if err != nil {
		return errnoOf(err, unix.EFAULT)
	}
	oldp, newp := paths[0], paths[1]
	to, errno := c.splitTaskPath(req.PID, ndir, newp)
	defer to.close()
	if errno != 0 {
		return errno
	}
	switch {
	case to.name == "" || to.name == "." || to.name == "..":
		return unix.EEXIST
	case to.slash:
		return unix.ENOENT
	case c.toolName(to.dfd, to.name):
		return unix.EPERM
	}
	if oldp == "" && flags&unix.AT_EMPTY_PATH != 0 || flags&unix.AT_SYMLINK_FOLLOW != 0 {
		// The old name is a whole file: the task's descriptor, or the path
		// with every link followed. Linked through this process's
		// /proc/self/fd as the kernel links an O_TMPFILE's; with
		// AT_EMPTY_PATH the kernel's own rule (CAP_DAC_READ_SEARCH) holds,
		// as the call is made with the task's credentials.
		ofd, err := openFor(req.PID, odir, oldp, uint64(flags&unix.AT_EMPTY_PATH))
		if err != nil {
			return errnoOf(err, unix.ENOENT)
		}
		defer unix.Close(ofd)
		if !c.stillWaiting(req) {
			return unix.ENOENT
		}
		unlock := lockLinks()
		defer unlock()
		var st unix.Stat_t
		if err := unix.Fstat(ofd, &st); err != nil {
			return errnoOf(err, unix.EIO)
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			if errno := c.linkMoveAllowed(ofd, "", to.dfd); errno != 0 {
				return errno
			}
		}
		if flags&unix.AT_EMPTY_PATH != 0 && oldp == "" {
			return errnoOf(unix.Linkat(ofd, "", to.dfd, to.name, unix.AT_EMPTY_PATH), unix.EIO)
		}
		return errnoOf(unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(ofd), to.dfd, to.name, unix.AT_SYMLINK_FOLLOW), unix.EIO)
	}
	from, errno := c.splitTaskPath(req.PID, odir, oldp)
	defer from.close()
	if errno != 0 {
		return errno
	}
	switch from.name {
	case "", ".", "..":
		return unix.EPERM // a folder
	}
	if !c.stillWaiting(req) {
		return unix.ENOENT
	}
	unlock := lockLinks()
	defer unlock()
	var st unix.Stat_t
	if err := unix.Fstatat(from.dfd, from.name, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
		if from.slash {
			return unix.ENOTDIR
		}
		if errno := c.linkMoveAllowed(from.dfd, from.name, to.dfd); errno != 0 {
			return errno
		}
	}
	return errnoOf(unix.Linkat(from.dfd, from.name, to.dfd, to.name, 0), unix.EIO)
}

// moveAllowed checks the move of from to to: EXDEV when, in the
// workspace, it would take a link out of it (see the top of this file).
// What the kernel would refuse anyway (a name that is not there, a move
// between file systems) is left to it.
func (c *callCtx) moveAllowed(from, to taskPath) unix.Errno {
	var fst, tst unix.Stat_t
	if unix.Fstat(from.dfd, &fst) != nil || unix.Fstat(to.dfd, &tst) != nil {
		return 0 // the call itself says why
	}
	if fst.Dev != c.ws.dev || tst.Dev != c.ws.dev || fst.Ino == tst.Ino {
		return 0 // not both in the workspace (EXDEV), or one folder
	}
	var st unix.Stat_t
	if unix.Fstatat(from.dfd, from.name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
		return 0
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		return c.linkMoveAllowed(from.dfd, from.name, to.dfd)
	case unix.S_IFDIR:
		now, ok1 := wsDepth(from.dfd, c.ws)
		then, ok2 := wsDepth(to.dfd, c.ws)
		switch {
		case !ok1 || !ok2:
			return unix.EXDEV
		case then >= now:
			return 0 // no deeper than before: every link still fits
		}
		fd, err := unix.Openat(from.dfd, from.name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return unix.EXDEV
		}
		budget := maxMoveWalk
		if !linksFit(fd, then+1, 0, &budget) {
			return unix.EXDEV
		}
	}
	return 0
}

// linkMoveAllowed checks the link name in the folder dfd (or, for "", the
// link dfd is) given a name in the folder to: EXDEV when it would not stay
// in the workspace from there.
func (c *callCtx) linkMoveAllowed(dfd int, name string, to int) unix.Errno {
	flags := 0
	if name == "" {
		flags = unix.AT_EMPTY_PATH
	}
	target, err := readlinkat(dfd, name, flags)
	if err != nil {
		return unix.EXDEV
	}
	if linkAllowed(to, target, c.ws) != 0 {
		return unix.EXDEV
	}
	return 0
}

// readlinkat reads a link's target (at most pathMax bytes: no link made
// in the guest is longer).
func readlinkat(dfd int, name string, flags int) (string, error) {
	buf := make([]byte, pathMax+1)
	var n int
	var err error
	if flags&unix.AT_EMPTY_PATH != 0 {
		n, err = unix.Readlinkat(dfd, "", buf)
	} else {
		n, err = unix.Readlinkat(dfd, name, buf)
	}
	if err != nil {
		return "", err
	}
	if n > pathMax {
		return "", unix.ENAMETOOLONG
	}
	return string(buf[:n]), nil
}

// wsDepth is how many folders the folder dfd is below the workspace's
// top; false when it is not in the workspace or deeper than maxMoveDepth.
func wsDepth(dfd int, ws wsIdentity) (int, bool) {
	cur, err := unix.Dup(dfd)
	if err != nil {
		return 0, false
	}
	defer func() { unix.Close(cur) }()
	for depth := 0; depth <= maxMoveDepth; depth++ {
		var st unix.Stat_t
		if unix.Fstat(cur, &st) != nil || st.Dev != ws.dev {
			return 0, false
		}
		if st.Ino == ws.ino {
			return depth, true
		}
		up, err := unix.Openat(cur, "..", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return 0, false
		}
		unix.Close(cur)
		cur = up
	}
	return 0, false
}

// linksFit says whether every link in the folder fd (which it closes) and
// below would stay in the workspace were fd at depth: each link's `..`s
// fit the depth of its folder. It spends budget on each entry and says
// false once it is spent, or below maxMoveDepth.
func linksFit(fd int, depth, level int, budget *int) bool {
	f := os.NewFile(uintptr(fd), "")
	defer f.Close()
	if level > maxMoveDepth {
		return false
	}
	for {
		ents, err := f.ReadDir(256)
		for _, e := range ents {
			if *budget--; *budget < 0 {
				return false
			}
			switch e.Type() {
			case os.ModeSymlink:
				target, err := readlinkat(fd, e.Name(), 0)
				if err != nil {
					return false
				}
				if ups, ok := linkUps(target); !ok || ups > depth {
					return false
				}
			case os.ModeDir:
				sub, err := unix.Openat(fd, e.Name(), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
				if err != nil || !linksFit(sub, depth+1, level+1, budget) {
					return false
				}
			}
		}
		if err != nil {
			return errors.Is(err, io.EOF)
		}
	}
}

// topToolNames are the names at the workspace's top that hold what the
// user's tools run on the host (api.HostRunPaths): .git, .envrc, .vscode,
// .idea.
var topToolNames = func() []string {
	var names []string
	for _, t := range toolConfig {
		names = append(names, t.name)
	}
	return names
}()

// toolName says whether name in the folder dfd is one of topToolNames at
// the workspace's top, which the task may not make (RefuseToolNames):
// a .git folder or link made there, or anything renamed or linked to one
// of those names, would be what git, direnv or an editor on the host
// reads and runs.
func (c *callCtx) toolName(dfd int, name string) bool {
	if !c.ws.toolNames || !slices.Contains(topToolNames, name) {
		return false
	}
	var st unix.Stat_t
	return unix.Fstat(dfd, &st) == nil && st.Dev == c.ws.dev && st.Ino == c.ws.ino
}

// mkdirFor does the task's mkdir call req (handed over with
// RefuseToolNames only), or refuses it: EPERM for a folder of
// topToolNames at the workspace's top.
func (c *callCtx) mkdirFor(req *seccompNotif) unix.Errno {
	a := req.Data.Args
	dirfd, addr, mode := int32(unix.AT_FDCWD), a[0], uint32(a[1])
	if int(req.Data.Nr) == unix.SYS_MKDIRAT {
		dirfd, addr, mode = int32(a[0]), a[1], uint32(a[2])
	}
	path, err := readString(req.PID, addr)
	if err != nil {
		return errnoOf(err, unix.EFAULT)
	}
	at, errno := c.splitTaskPath(req.PID, dirfd, path)
	defer at.close()
	if errno != 0 {
		return errno
	}
	if at.name == "" || at.name == "." || at.name == ".." {
		return unix.EEXIST
	}
	if !c.stillWaiting(req) {
		return unix.ENOENT
	}
	if c.toolName(at.dfd, at.name) {
		return unix.EPERM
	}
	// The kernel takes the thread's umask from the mode as well: 0 when
	// serveCalls gave the thread its own (else the agent's applies too).
	mode &= 0o7777 &^ c.umask
	return errnoOf(unix.Mkdirat(at.dfd, at.name, mode), unix.EIO)
}
