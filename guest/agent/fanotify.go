//go:build linux

package agent

import (
	"encoding/binary"
	"errors"
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// topFiles are the regular files at the workspace's top that the user's
// tools run on the host and that a task could make with a creating open:
// a .git file names the repository git uses (its config and hooks), an
// .envrc is what direnv runs. The agent refuses the other ways to make
// them (mkdir, symlink, rename, link: RefuseToolNames), but an open is the
// kernel's alone.
var topFiles = []string{".git", ".envrc"}

// topGuard answers the kernel's permission events for opens of the
// workspace's direct children (fanotify, FAN_CLASS_CONTENT, an inode mark
// of FAN_OPEN_PERM|FAN_EVENT_ON_CHILD on the top folder): it denies an
// open of a top-level .git or .envrc regular file that is writable in the
// opener's mount. The ones that were there when a task started are
// read-only bind mounts (guardToolConfig), so git and direnv read them as
// before; one a task made with open(O_CREAT) is writable, and its open is
// denied (EPERM). The kernel creates the file before it asks, so the
// empty file the open leaves is removed before the answer.
//
// The kernel waits for each answer, task root included, so the guard is a
// thread that does nothing else: it reads events and answers each with
// fstat, fstatat and fstatfs of the event's file and the top folder, none
// of which opens a file there (an open of its own would wait for itself).
type topGuard struct {
	fan int // the fanotify group
	top int // the workspace's top folder (O_PATH)
	// self is the agent's pid: its own opens are allowed unchecked.
	self int32
}

// newTopGuard marks dir; serve answers. It needs CAP_SYS_ADMIN and a kernel with
// CONFIG_FANOTIFY_ACCESS_PERMISSIONS.
func newTopGuard(dir string) (*topGuard, error) {
	fan, err := unix.FanotifyInit(unix.FAN_CLASS_CONTENT|unix.FAN_CLOEXEC, unix.O_RDONLY|unix.O_LARGEFILE|unix.O_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("fanotify_init", err)
	}
	top, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(fan)
		return nil, err
	}
	if err := unix.FanotifyMark(fan, unix.FAN_MARK_ADD, unix.FAN_OPEN_PERM|unix.FAN_EVENT_ON_CHILD, unix.AT_FDCWD, dir); err != nil {
		unix.Close(fan)
		unix.Close(top)
		return nil, os.NewSyscallError("fanotify_mark", err)
	}
	return &topGuard{fan: fan, top: top, self: int32(os.Getpid())}, nil
}

// guardTopFiles starts the guard where tasks may not make the tool
// configuration's names (Config.RefuseToolNames: direct mode, guarded).
// Without it (a kernel without fanotify's permission events) a task can
// still make those two files; the guard protects them from the next task
// on.
func (s *Server) guardTopFiles() {
	if !s.cfg.RefuseToolNames {
		return
	}
	g, err := newTopGuard(s.cfg.WorkspaceDir)
	if err != nil {
		s.log.Warn("tasks can make .git and .envrc files at the workspace's top", "err", err)
		return
	}
	go g.serve()
}

// serve reads and answers events for as long as the agent runs.
func (g *topGuard) serve() {
	runtime.LockOSThread() // a blocking read: a thread of its own
	var buf [4096]byte
	for {
		n, err := unix.Read(g.fan, buf[:])
		if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
			continue
		}
		if err != nil || n <= 0 {
			return
		}
		for b := buf[:n]; len(b) >= int(unsafe.Sizeof(unix.FanotifyEventMetadata{})); {
			m := (*unix.FanotifyEventMetadata)(unsafe.Pointer(&b[0]))
			if m.Event_len < uint32(unsafe.Sizeof(*m)) || int(m.Event_len) > len(b) {
				break
			}
			b = b[m.Event_len:]
			if m.Fd < 0 {
				continue // a queue overflow: no permission event is dropped
			}
			answer := uint32(unix.FAN_ALLOW)
			if m.Mask&unix.FAN_OPEN_PERM != 0 && m.Pid != g.self && g.deny(int(m.Fd)) {
				answer = unix.FAN_DENY
			}
			g.respond(m.Fd, answer)
			unix.Close(int(m.Fd))
		}
	}
}

func (g *topGuard) respond(fd int32, answer uint32) {
	var r [8]byte
	binary.NativeEndian.PutUint32(r[0:], uint32(fd))
	binary.NativeEndian.PutUint32(r[4:], answer)
	for {
		if _, err := unix.Write(g.fan, r[:]); !errors.Is(err, unix.EINTR) {
			return
		}
	}
}

// deny reports whether the open of fd is refused: a regular file that is
// the top folder's .git or .envrc and writable in its mount. The file's
// name there is removed when it has nothing of its own: it is empty (the
// open made it) or has another name too (a link a task made to write it
// through; its content stays under that name).
func (g *topGuard) deny(fd int) bool {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return false
	}
	for _, name := range topFiles {
		var nst unix.Stat_t
		if unix.Fstatat(g.top, name, &nst, unix.AT_SYMLINK_NOFOLLOW) != nil || nst.Dev != st.Dev || nst.Ino != st.Ino {
			continue
		}
		var fs unix.Statfs_t
		if err := unix.Fstatfs(fd, &fs); err == nil && fs.Flags&unix.ST_RDONLY != 0 {
			return false // protected: git and direnv read it
		}
		if st.Size == 0 || st.Nlink > 1 {
			_ = unix.Unlinkat(g.top, name, 0)
		}
		return true
	}
	return false
}
