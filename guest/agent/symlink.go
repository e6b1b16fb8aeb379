//go:build linux

package agent

import (
	"bytes"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Symbolic links in the workspace. The host follows a link the guest made
// in the user's folder: an editor opening it, a host-side agent reading
// it, `git add` of a folder holding one. So in the workspace a task's link
// must be relative and stay inside it: `../lib/x` from a folder two
// levels down is fine (npm's node_modules/.bin, a git checkout's links),
// `/etc/passwd`, `../../..` from the top, or `a/../../x` (a `..` after a
// name, which a link named `a` could send anywhere) are refused (EPERM);
// python's venv then copies its interpreter instead. Links elsewhere are
// not restricted.
//
// seccomp cannot read the target, a string in the task's memory: the
// filter hands symlink and symlinkat to the agent (SECCOMP_RET_USER_NOTIF),
// which reads both strings from /proc/PID/mem, checks that the call is
// still waiting (so the pid still was the task's), and makes the link
// itself, with the task's file system uid, gid and groups, on a thread of
// its own: the task's memory may change after the check, so the call is
// never let through (SECCOMP_USER_NOTIF_FLAG_CONTINUE), it is done for it.
//
// chmod calls that set a setuid or setgid bit come the same way
// (chmodFor): refused for a file in the workspace, done for the task
// elsewhere. A link or a file is in the workspace when it is on the
// workspace's file system (its device): the guest mounts nothing else of
// that device, and only guest root could.

// The seccomp user-notification ABI (linux/seccomp.h).
const (
	notifIDValid = 0x40082102 // SECCOMP_IOCTL_NOTIF_ID_VALID, _IOW('!', 2, __u64)
	pathMax      = 4096
)

type seccompData struct {
	Nr   int32
	Arch uint32
	IP   uint64
	Args [6]uint64
}

type seccompNotif struct {
	ID    uint64
	PID   uint32
	Flags uint32
	Data  seccompData
}

type seccompNotifResp struct {
	ID    uint64
	Val   int64
	Error int32
	Flags uint32
}

// wsIdentity names the workspace's top folder: its device and inode;
// toolNames refuses the tool configuration's names there
// (Config.RefuseToolNames).
type wsIdentity struct {
	dev, ino  uint64
	toolNames bool
}

// serveCalls answers the calls the filter hands over (symlink, chmod
// with a setuid or setgid bit, rename, hard link, and mkdir when the
// tool configuration's names are refused) of the tasks whose filter made
// listener, until none of them is left; it closes listener. It keeps its
// goroutine on one thread, whose file system credentials it switches to
// a task's for each call it does for it (asTask).
func serveCalls(listener int, ws wsIdentity) {
	// The thread waits in poll(2) itself rather than in Go's netpoller: a
	// goroutine locked to its thread, woken by the netpoller, is handed
	// from thread to thread, which costs each call more than its work.
	runtime.LockOSThread()
	if unix.Gettid() == unix.Getpid() {
		// The main thread is wedged, not ended, when a goroutine locked
		// to it exits (as in restrictedStart): serve from another.
		done := make(chan struct{})
		go func() {
			defer close(done)
			serveCalls(listener, ws)
		}()
		<-done
		runtime.UnlockOSThread()
		return
	}
	defer unix.Close(listener)
	// Never unlocked: the thread's umask and credentials change per call,
	// and it ends with this goroutine. Its umask is its own (CLONE_FS),
	// 0, so that a mkdir done for a task gets the task's umask alone.
	c := &callCtx{listener: listener, ws: ws, self: threadCreds()}
	if err := unix.Unshare(unix.CLONE_FS); err == nil {
		unix.Umask(0)
	}
	for !c.tainted {
		// The receive would wait on even when no task is left: wait for a
		// notification, or for the last task to end, in poll first.
		p := []unix.PollFd{{Fd: int32(listener), Events: unix.POLLIN}}
		if _, err := unix.Poll(p, -1); err != nil {
			if err == unix.EINTR {
				continue
			}
			return
		}
		if p[0].Revents&unix.POLLIN == 0 {
			return // no task uses the filter any more
		}
		var req seccompNotif
		if err := ioctlPtr(listener, unix.SECCOMP_IOCTL_NOTIF_RECV, unsafe.Pointer(&req)); err != nil {
			if err == unix.ENOENT || err == unix.EINTR {
				continue // the task died before its call was received
			}
			return
		}
		resp := seccompNotifResp{ID: req.ID}
		var errno unix.Errno
		// Cases, not constants: the calls an architecture lacks are -1.
		switch nr := int(req.Data.Nr); {
		case nr == unix.SYS_SYMLINKAT || nr == sysSymlink:
			errno = c.asTask(req.PID, func() unix.Errno { return c.symlinkFor(&req) })
		case nr == sysRenameat || nr == unix.SYS_RENAMEAT2 || nr == sysRename:
			errno = c.asTask(req.PID, func() unix.Errno { return c.renameFor(&req) })
		case nr == unix.SYS_LINKAT || nr == sysLink:
			errno = c.asTask(req.PID, func() unix.Errno { return c.linkFor(&req) })
		case nr == unix.SYS_MKDIRAT || nr == sysMkdir:
			errno = c.asTask(req.PID, func() unix.Errno { return c.mkdirFor(&req) })
		default:
			errno = c.chmodFor(&req)
		}
		if errno != 0 {
			resp.Error = -int32(errno)
		}
		// ENOENT: the task died meanwhile; nothing to answer.
		_ = ioctlPtr(listener, unix.SECCOMP_IOCTL_NOTIF_SEND, unsafe.Pointer(&resp))
	}
}

// callCtx is what serveCalls's handlers share: the listener, the
// workspace, and the credentials its thread has of its own.
type callCtx struct {
	listener int
	ws       wsIdentity
	self     fsIdentity
	// tainted: the thread's own credentials could not be put back.
	tainted bool
	// umask is the task's, while asTask runs for it.
	umask uint32
}

// fsIdentity is a thread's file system uid, gid and groups.
type fsIdentity struct {
	uid, gid uint32
	groups   []uint32
	umask    uint32 // the process's (fsCreds)
	err      error
}

// threadCreds reads the calling thread's file system credentials.
func threadCreds() fsIdentity {
	// setfsuid and setfsgid with an invalid id change nothing and return
	// the current one.
	uid, _, _ := unix.RawSyscall(unix.SYS_SETFSUID, ^uintptr(0), 0, 0)
	gid, _, _ := unix.RawSyscall(unix.SYS_SETFSGID, ^uintptr(0), 0, 0)
	id := fsIdentity{uid: uint32(uid), gid: uint32(gid)}
	n, _, e := unix.RawSyscall(unix.SYS_GETGROUPS, 0, 0, 0)
	if e != 0 {
		id.err = e
		return id
	}
	id.groups = make([]uint32, n)
	if n > 0 {
		m, _, e := unix.RawSyscall(unix.SYS_GETGROUPS, n, uintptr(unsafe.Pointer(&id.groups[0])), 0)
		if e != 0 || m != n {
			id.err = unix.EAGAIN
		}
	}
	return id
}

// become gives the calling thread, alone, the credentials id.
func (id fsIdentity) become() unix.Errno {
	var list uintptr
	if len(id.groups) > 0 {
		list = uintptr(unsafe.Pointer(&id.groups[0]))
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(id.groups)), list, 0); e != 0 {
		return e
	}
	// Each returns the id before; called again with an invalid one, the
	// id now.
	unix.RawSyscall(unix.SYS_SETFSGID, uintptr(id.gid), 0, 0)
	unix.RawSyscall(unix.SYS_SETFSUID, uintptr(id.uid), 0, 0)
	gid, _, _ := unix.RawSyscall(unix.SYS_SETFSGID, ^uintptr(0), 0, 0)
	uid, _, _ := unix.RawSyscall(unix.SYS_SETFSUID, ^uintptr(0), 0, 0)
	if uint32(uid) != id.uid || uint32(gid) != id.gid {
		return unix.EPERM
	}
	return 0
}

func ioctlPtr(fd int, req uint, arg unsafe.Pointer) error {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(arg))
	if e != 0 {
		return e
	}
	return nil
}

// symlinkFor does the task's symlink call req, or refuses it. It runs with
// the task's credentials (asTask), as the rename and link calls do: the
// folders are opened as the task would open them, the call is the task's.
func (c *callCtx) symlinkFor(req *seccompNotif) unix.Errno {
	var target, path string
	dirfd := int32(unix.AT_FDCWD)
	var err error
	switch int(req.Data.Nr) {
	case unix.SYS_SYMLINKAT:
		dirfd = int32(req.Data.Args[1])
		target, err = readString(req.PID, req.Data.Args[0])
		if err == nil {
			path, err = readString(req.PID, req.Data.Args[2])
		}
	case sysSymlink:
		target, err = readString(req.PID, req.Data.Args[0])
		if err == nil {
			path, err = readString(req.PID, req.Data.Args[1])
		}
	default:
		return unix.ENOSYS
	}
	if err != nil {
		return errnoOf(err, unix.EFAULT)
	}
	if target == "" || path == "" {
		return unix.ENOENT
	}
	dir, name := ".", path
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		dir, name = path[:i+1], path[i+1:]
	}
	if name == "" || name == "." || name == ".." {
		return unix.EEXIST
	}
	dfd, errno := c.taskDir(req.PID, dirfd, dir)
	if errno != 0 {
		return errno
	}
	defer unix.Close(dfd)
	// Read and opened while the call still waited: all of it was the
	// task's.
	if !c.stillWaiting(req) {
		return unix.ENOENT
	}
	if c.toolName(dfd, name) {
		return unix.EPERM
	}
	unlock := lockLinks()
	defer unlock()
	if errno := linkAllowed(dfd, target, c.ws); errno != 0 {
		return errno
	}
	return errnoOf(unix.Symlinkat(target, dfd, name), unix.EIO)
}

// stillWaiting says whether the task's call req still waits for its
// answer: then its pid was still the task's while the call was read.
func (c *callCtx) stillWaiting(req *seccompNotif) bool {
	id := req.ID
	return ioctlPtr(c.listener, notifIDValid, unsafe.Pointer(&id)) == nil
}

// taskDir opens the folder dir (a path of the task pid's, resolved from
// its dirfd, its working folder or, when absolute, its root) O_PATH. Run
// with the task's credentials, so that its search permissions apply.
func (c *callCtx) taskDir(pid uint32, dirfd int32, dir string) (int, unix.Errno) {
	fd, err := openTaskPath(pid, dirfd, dir, unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC})
	if err != nil {
		return -1, errnoOf(err, unix.ENOENT)
	}
	return fd, 0
}

// linkUps is how many folders a link to target climbs before it names
// one; ok is false for a target that may end anywhere whatever folder the
// link is in: an absolute one, or one with a `..` after a name (which a
// link of that name could send anywhere).
func linkUps(target string) (ups int, ok bool) {
	if strings.HasPrefix(target, "/") {
		return 0, false
	}
	named := false
	for _, c := range strings.Split(target, "/") {
		switch c {
		case "", ".":
		case "..":
			if named {
				return 0, false
			}
			ups++
		default:
			named = true
		}
	}
	return ups, true
}

// linkAllowed checks a link to target made in the folder dfd.
func linkAllowed(dfd int, target string, ws wsIdentity) unix.Errno {
	var st unix.Stat_t
	if err := unix.Fstat(dfd, &st); err != nil {
		return errnoOf(err, unix.EIO)
	}
	if st.Dev != ws.dev {
		return 0 // not in the workspace
	}
	ups, ok := linkUps(target)
	if !ok {
		return unix.EPERM
	}
	// Climb ups folders from dfd: the workspace's top must not be among
	// the folders climbed from.
	cur, err := unix.Dup(dfd)
	if err != nil {
		return unix.EIO
	}
	defer func() { unix.Close(cur) }()
	for i := 0; i < ups; i++ {
		if err := unix.Fstat(cur, &st); err != nil {
			return unix.EIO
		}
		if st.Dev != ws.dev || st.Ino == ws.ino {
			return unix.EPERM
		}
		up, err := unix.Openat(cur, "..", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return unix.EPERM
		}
		unix.Close(cur)
		cur = up
	}
	if err := unix.Fstat(cur, &st); err != nil || st.Dev != ws.dev {
		return unix.EPERM
	}
	return 0
}

// asTask runs op on the calling thread, which serveCalls keeps to
// itself, with the file system uid, gid and groups of the task pid, and
// returns its errno. The thread's own credentials are put back after.
func (c *callCtx) asTask(pid uint32, op func() unix.Errno) unix.Errno {
	if c.self.err != nil {
		return unix.EIO
	}
	task, err := fsCreds(pid)
	if err != nil {
		return unix.ENOENT
	}
	c.umask = task.umask
	errno := task.become()
	if errno == 0 {
		errno = op()
	}
	if c.self.become() != 0 {
		c.tainted = true
	}
	return errno
}

// fsCreds reads a process's file system uid and gid, its groups and its
// umask (0022 when its status has none, before Linux 4.7).
func fsCreds(pid uint32) (fsIdentity, error) {
	id := fsIdentity{umask: 0o022}
	fd, err := unix.Open("/proc/"+strconv.FormatUint(uint64(pid), 10)+"/status", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return id, err
	}
	// The status of a process is some 1,500 bytes; the ids come first.
	buf := make([]byte, 8192)
	n, err := unix.Read(fd, buf)
	unix.Close(fd)
	if err != nil {
		return id, err
	}
	var seen int
	for _, line := range strings.Split(string(buf[:n]), "\n") {
		k, v, _ := strings.Cut(line, ":")
		f := strings.Fields(v)
		switch {
		case k == "Umask" && len(f) == 1:
			n, _ := strconv.ParseUint(f[0], 8, 32)
			id.umask = uint32(n) & 0o777
		case k == "Uid" && len(f) == 4:
			n, _ := strconv.ParseUint(f[3], 10, 32)
			id.uid, seen = uint32(n), seen|1
		case k == "Gid" && len(f) == 4:
			n, _ := strconv.ParseUint(f[3], 10, 32)
			id.gid, seen = uint32(n), seen|2
		case k == "Groups":
			for _, g := range f {
				n, _ := strconv.ParseUint(g, 10, 32)
				id.groups = append(id.groups, uint32(n))
			}
			seen |= 4
		}
		if seen == 7 {
			return id, nil
		}
	}
	return id, errors.New("no Uid, Gid or Groups in the task's status")
}

// readString reads a NUL-terminated string of at most pathMax bytes at addr
// in pid's memory.
func readString(pid uint32, addr uint64) (string, error) {
	s, err := readStrings(pid, addr)
	if err != nil {
		return "", err
	}
	return s[0], nil
}

// readStrings reads a string (as readString) at each of addrs.
func readStrings(pid uint32, addrs ...uint64) ([]string, error) {
	fd, err := unix.Open("/proc/"+strconv.FormatUint(uint64(pid), 10)+"/mem", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	out := make([]string, len(addrs))
	buf := make([]byte, 512)
	for i, addr := range addrs {
		var s []byte
		for {
			if len(s) >= pathMax {
				return nil, unix.ENAMETOOLONG
			}
			// Never past a page's end: the next page may not be mapped.
			n := min(len(buf), 4096-int((addr+uint64(len(s)))%4096))
			got, err := unix.Pread(fd, buf[:n], int64(addr)+int64(len(s)))
			if got < 0 {
				got = 0
			}
			if j := bytes.IndexByte(buf[:got], 0); j >= 0 {
				s = append(s, buf[:j]...)
				break
			}
			s = append(s, buf[:got]...)
			if err != nil || got == 0 {
				return nil, unix.EFAULT
			}
		}
		out[i] = string(s)
	}
	return out, nil
}

func errnoOf(err error, def unix.Errno) unix.Errno {
	if err == nil {
		return 0
	}
	var e unix.Errno
	if errors.As(err, &e) {
		return e
	}
	return def
}

// chmodFor does the task's chmod call req, which sets a setuid or setgid
// bit: refused for a file in the workspace, done for the task elsewhere
// (dpkg and install set them on programs in the guest's system).
func (c *callCtx) chmodFor(req *seccompNotif) unix.Errno {
	a := req.Data.Args
	var fd int
	var err error
	var mode uint32
	switch int(req.Data.Nr) {
	case unix.SYS_FCHMOD:
		mode = uint32(a[1])
		if int32(a[0]) < 0 {
			return unix.EBADF
		}
		fd, err = openFor(req.PID, int32(a[0]), "", unix.AT_EMPTY_PATH)
	case unix.SYS_FCHMODAT, sysFchmodat2, sysChmod:
		dirfd, path, flags := int32(a[0]), a[1], uint64(0)
		mode = uint32(a[2])
		switch int(req.Data.Nr) {
		case sysChmod:
			dirfd, path, mode = unix.AT_FDCWD, a[0], uint32(a[1])
		case sysFchmodat2:
			flags = a[3]
		}
		var p string
		if p, err = readString(req.PID, path); err == nil {
			fd, err = openFor(req.PID, dirfd, p, flags)
		}
	default:
		return unix.ENOSYS
	}
	if err != nil {
		return errnoOf(err, unix.ENOENT)
	}
	defer unix.Close(fd)
	if !c.stillWaiting(req) {
		return unix.ENOENT
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return errnoOf(err, unix.EIO)
	}
	if st.Dev == c.ws.dev {
		return unix.EPERM
	}
	return c.asTask(req.PID, func() unix.Errno {
		return errnoOf(unix.Chmod("/proc/self/fd/"+strconv.Itoa(fd), mode&0o7777), unix.EIO)
	})
}

// openFor opens path as the task pid would resolve it from dirfd, O_PATH
// (fchmodat2's AT_SYMLINK_NOFOLLOW and AT_EMPTY_PATH are honoured).
func openFor(pid uint32, dirfd int32, path string, flags uint64) (int, error) {
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC}
	if flags&unix.AT_SYMLINK_NOFOLLOW != 0 {
		how.Flags |= unix.O_NOFOLLOW
	}
	if path == "" && flags&unix.AT_EMPTY_PATH == 0 {
		return -1, unix.ENOENT
	}
	return openTaskPath(pid, dirfd, path, how)
}

// openTaskPath opens path with how as the task pid resolves it: from its
// dirfd, its working folder or, when absolute, its root ("" is dirfd's
// own file, as with AT_EMPTY_PATH).
func openTaskPath(pid uint32, dirfd int32, path string, how unix.OpenHow) (int, error) {
	p := strconv.FormatUint(uint64(pid), 10)
	base := "/proc/" + p + "/cwd"
	switch {
	case strings.HasPrefix(path, "/"):
		base, path = "/proc/"+p+"/root", strings.TrimLeft(path, "/")
		how.Resolve |= unix.RESOLVE_IN_ROOT
	case dirfd != unix.AT_FDCWD:
		base = "/proc/" + p + "/fd/" + strconv.Itoa(int(dirfd))
	}
	if path == "" {
		path = "."
	}
	bfd, err := unix.Open(base, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		if dirfd != unix.AT_FDCWD && errors.Is(err, unix.ENOENT) {
			return -1, unix.EBADF
		}
		return -1, err
	}
	defer unix.Close(bfd)
	if path == "." && how.Flags&unix.O_DIRECTORY == 0 {
		return unix.Dup(bfd) // the file itself, whatever it is
	}
	return unix.Openat2(bfd, path, &how)
}
