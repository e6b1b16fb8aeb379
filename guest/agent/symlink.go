//go:build linux

package agent

import (
	"bufio"
	"bytes"
	"errors"
	"os"
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

// wsIdentity names the workspace's top folder: its device and inode.
type wsIdentity struct {
	dev, ino uint64
}

// serveCalls answers the calls the filter hands over (symlink, and chmod
// with a setuid or setgid bit) of the tasks whose filter made listener,
// until none of them is left; it closes listener.
func serveCalls(listener int, ws wsIdentity) {
	if err := unix.SetNonblock(listener, true); err != nil {
		unix.Close(listener)
		return
	}
	f := os.NewFile(uintptr(listener), "seccomp-listener")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	for {
		var req seccompNotif
		var hup bool
		var rerr error
		err := rc.Read(func(fd uintptr) bool {
			// The receive blocks whatever the descriptor's flags: wait for
			// a notification in the poller first.
			p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			if n, err := unix.Poll(p, 0); err != nil || n == 0 {
				return err != nil && err != unix.EINTR
			}
			if p[0].Revents&unix.POLLIN == 0 {
				hup = true // no task uses the filter any more
				return true
			}
			req = seccompNotif{}
			rerr = ioctlPtr(int(fd), unix.SECCOMP_IOCTL_NOTIF_RECV, unsafe.Pointer(&req))
			return true
		})
		if err != nil || hup {
			return
		}
		if rerr != nil {
			if rerr == unix.ENOENT || rerr == unix.EINTR {
				continue // the task died before its call was received
			}
			return
		}
		resp := seccompNotifResp{ID: req.ID}
		var errno unix.Errno
		switch int(req.Data.Nr) {
		case unix.SYS_SYMLINKAT, sysSymlink:
			errno = symlinkFor(listener, &req, ws)
		default:
			errno = chmodFor(listener, &req, ws)
		}
		if errno != 0 {
			resp.Error = -int32(errno)
		}
		// ENOENT: the task died meanwhile; nothing to answer.
		_ = rc.Control(func(fd uintptr) {
			_ = ioctlPtr(int(fd), unix.SECCOMP_IOCTL_NOTIF_SEND, unsafe.Pointer(&resp))
		})
	}
}

func ioctlPtr(fd int, req uint, arg unsafe.Pointer) error {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(arg))
	if e != 0 {
		return e
	}
	return nil
}

// symlinkFor does the task's symlink call req, or refuses it.
func symlinkFor(listener int, req *seccompNotif, ws wsIdentity) unix.Errno {
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
	pid := strconv.FormatUint(uint64(req.PID), 10)
	base := "/proc/" + pid + "/cwd"
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC}
	switch {
	case strings.HasPrefix(path, "/"):
		base, dir = "/proc/"+pid+"/root", strings.TrimLeft(dir, "/")
		how.Resolve = unix.RESOLVE_IN_ROOT
		if dir == "" {
			dir = "."
		}
	case dirfd != unix.AT_FDCWD:
		base = "/proc/" + pid + "/fd/" + strconv.Itoa(int(dirfd))
	}
	bfd, err := unix.Open(base, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return errnoOf(err, unix.ENOENT)
	}
	defer unix.Close(bfd)
	dfd, err := unix.Openat2(bfd, dir, &how)
	if err != nil {
		return errnoOf(err, unix.ENOENT)
	}
	defer unix.Close(dfd)
	// Read and opened while the call still waited: all of it was the
	// task's.
	id := req.ID
	if ioctlPtr(listener, notifIDValid, unsafe.Pointer(&id)) != nil {
		return unix.ENOENT
	}
	if errno := linkAllowed(dfd, target, ws); errno != 0 {
		return errno
	}
	return symlinkAs(req.PID, target, dfd, name)
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
	if strings.HasPrefix(target, "/") {
		return unix.EPERM
	}
	ups, named := 0, false
	for _, c := range strings.Split(target, "/") {
		switch c {
		case "", ".":
		case "..":
			if named {
				return unix.EPERM
			}
			ups++
		default:
			named = true
		}
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

// symlinkAs makes the link with the task's file system credentials.
func symlinkAs(pid uint32, target string, dfd int, name string) unix.Errno {
	return asTask(pid, func() error { return unix.Symlinkat(target, dfd, name) })
}

// asTask runs op with the file system uid, gid and groups of the task
// pid, on a thread of its own that ends afterwards, and returns its errno.
func asTask(pid uint32, op func() error) unix.Errno {
	uid, gid, groups, err := fsCreds(pid)
	if err != nil {
		return unix.ENOENT
	}
	done := make(chan unix.Errno, 1)
	go func() {
		// Never unlocked: the thread's credentials die with it.
		runtime.LockOSThread()
		var list uintptr
		if len(groups) > 0 {
			list = uintptr(unsafe.Pointer(&groups[0]))
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(groups)), list, 0); e != 0 {
			done <- e
			return
		}
		unix.RawSyscall(unix.SYS_SETFSGID, uintptr(gid), 0, 0)
		unix.RawSyscall(unix.SYS_SETFSUID, uintptr(uid), 0, 0)
		done <- errnoOf(op(), unix.EIO)
	}()
	return <-done
}

// fsCreds reads a process's file system uid and gid and its groups.
func fsCreds(pid uint32) (uid, gid uint32, groups []uint32, err error) {
	b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(pid), 10) + "/status")
	if err != nil {
		return 0, 0, nil, err
	}
	var seen int
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		f := strings.Fields(v)
		switch {
		case k == "Uid" && len(f) == 4:
			n, _ := strconv.ParseUint(f[3], 10, 32)
			uid, seen = uint32(n), seen|1
		case k == "Gid" && len(f) == 4:
			n, _ := strconv.ParseUint(f[3], 10, 32)
			gid, seen = uint32(n), seen|2
		case k == "Groups":
			for _, g := range f {
				n, _ := strconv.ParseUint(g, 10, 32)
				groups = append(groups, uint32(n))
			}
		}
	}
	if seen != 3 {
		return 0, 0, nil, errors.New("no Uid or Gid in the task's status")
	}
	return uid, gid, groups, nil
}

// readString reads a NUL-terminated string of at most pathMax bytes at addr
// in pid's memory.
func readString(pid uint32, addr uint64) (string, error) {
	f, err := os.Open("/proc/" + strconv.FormatUint(uint64(pid), 10) + "/mem")
	if err != nil {
		return "", err
	}
	defer f.Close()
	var out []byte
	buf := make([]byte, 512)
	for len(out) < pathMax {
		// Never past a page's end: the next page may not be mapped.
		n := min(len(buf), 4096-int((addr+uint64(len(out)))%4096))
		got, err := f.ReadAt(buf[:n], int64(addr)+int64(len(out)))
		if i := bytes.IndexByte(buf[:got], 0); i >= 0 {
			return string(append(out, buf[:i]...)), nil
		}
		out = append(out, buf[:got]...)
		if err != nil || got == 0 {
			return "", unix.EFAULT
		}
	}
	return "", unix.ENAMETOOLONG
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
func chmodFor(listener int, req *seccompNotif, ws wsIdentity) unix.Errno {
	pid := strconv.FormatUint(uint64(req.PID), 10)
	a := req.Data.Args
	var fd int
	var err error
	var mode uint32
	switch int(req.Data.Nr) {
	case unix.SYS_FCHMOD:
		mode = uint32(a[1])
		fd, err = unix.Open("/proc/"+pid+"/fd/"+strconv.Itoa(int(int32(a[0]))), unix.O_PATH|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) {
			err = unix.EBADF
		}
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
			fd, err = openFor(pid, dirfd, p, flags)
		}
	default:
		return unix.ENOSYS
	}
	if err != nil {
		return errnoOf(err, unix.ENOENT)
	}
	defer unix.Close(fd)
	id := req.ID
	if ioctlPtr(listener, notifIDValid, unsafe.Pointer(&id)) != nil {
		return unix.ENOENT
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return errnoOf(err, unix.EIO)
	}
	if st.Dev == ws.dev {
		return unix.EPERM
	}
	return asTask(req.PID, func() error {
		return unix.Chmod("/proc/self/fd/"+strconv.Itoa(fd), mode&0o7777)
	})
}

// openFor opens path as the task pid would resolve it from dirfd, O_PATH
// (fchmodat2's AT_SYMLINK_NOFOLLOW and AT_EMPTY_PATH are honoured).
func openFor(pid string, dirfd int32, path string, flags uint64) (int, error) {
	base := "/proc/" + pid + "/cwd"
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC}
	if flags&unix.AT_SYMLINK_NOFOLLOW != 0 {
		how.Flags |= unix.O_NOFOLLOW
	}
	switch {
	case path == "" && flags&unix.AT_EMPTY_PATH == 0:
		return -1, unix.ENOENT
	case strings.HasPrefix(path, "/"):
		base, path = "/proc/"+pid+"/root", strings.TrimLeft(path, "/")
		how.Resolve = unix.RESOLVE_IN_ROOT
	case dirfd != unix.AT_FDCWD:
		base = "/proc/" + pid + "/fd/" + strconv.Itoa(int(dirfd))
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
	if path == "." {
		return unix.Dup(bfd)
	}
	return unix.Openat2(bfd, path, &how)
}
