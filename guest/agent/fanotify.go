//go:build linux

package agent

import (
	"encoding/binary"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
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
// empty file the open leaves is removed once the open has returned.
//
// The kernel waits for each answer, task root included, so the guard is a
// thread that does nothing else: it reads events and answers each from
// the event's file alone (fstat, fstatfs, its /proc/self/fd link), never
// opening or looking up a name in the top folder (see deny).
type topGuard struct {
	fan int // the fanotify group
	top int // the workspace's top folder (O_PATH)
	// self is the agent's pid: its own opens are allowed unchecked.
	self int32
	log  *slog.Logger
	dir  string // the top folder's path, as /proc/self/fd shows its files

	mu sync.Mutex
	// denied are the files whose opens were refused: a second name at
	// the top does not open them either.
	denied map[fileID]struct{}
	remove chan removal
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
	g := &topGuard{fan: fan, top: top, self: int32(os.Getpid()), log: slog.New(slog.DiscardHandler), dir: filepath.Clean(dir),
		denied: map[fileID]struct{}{}, remove: make(chan removal, 64)}
	go g.removeRefused()
	return g, nil
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
	g.log = s.log
	s.log.Debug("top guard on", "dir", s.cfg.WorkspaceDir)
	go g.serve()
}

// serve reads and answers events for as long as the agent runs.
func (g *topGuard) serve() {
	runtime.LockOSThread() // a blocking read: a thread of its own
	var buf [4096]byte
	for {
		n, err := unix.Read(g.fan, buf[:])
		if err != nil {
			g.log.Warn("top guard read", "err", err)
		}
		if errors.Is(err, unix.EBADF) || errors.Is(err, unix.EINVAL) {
			return
		}
		if err != nil || n <= 0 {
			continue
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

// deny reports whether the open of fd is refused: a regular file that
// is the top folder's .git or .envrc, or was when an open of it was
// refused (a second name a task gave it), and is writable in its mount.
//
// It looks up no name in the top folder: a creating open on 9p, virtiofs
// or FUSE (atomic_open) asks while it holds the folder's lock, so a lookup
// there would wait for the open that waits for the answer. The file's
// name comes from /proc/self/fd instead (d_path takes no folder lock).
func (g *topGuard) deny(fd int) bool {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return false
	}
	id := fileID{st.Dev, st.Ino}
	g.mu.Lock()
	_, seen := g.denied[id]
	g.mu.Unlock()
	name := g.topName(fd)
	if name == "" && !seen {
		return false
	}
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err == nil && fs.Flags&unix.ST_RDONLY != 0 {
		return false // protected: git and direnv read it
	}
	if !seen {
		g.mu.Lock()
		if len(g.denied) < maxDenied {
			g.denied[id] = struct{}{}
		}
		g.mu.Unlock()
	}
	// Removed when it has nothing of its own: empty (the creating open
	// made it) or with another name (a link a task made to write it
	// through; its content stays under that name). Decided now: what is
	// written after this came through another name.
	if name != "" && (st.Size == 0 || st.Nlink > 1) {
		if dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0); err == nil {
			select {
			case g.remove <- removal{name, dup, id}:
			default:
				unix.Close(dup)
			}
		}
	}
	return true
}

// topName is which of topFiles the file fd is at the top folder, or "".
func (g *topGuard) topName(fd int) string {
	var buf [unix.PathMax]byte
	n, err := unix.Readlink("/proc/self/fd/"+strconv.Itoa(fd), buf[:])
	if err != nil {
		return ""
	}
	for _, f := range topFiles {
		if string(buf[:n]) == g.dir+"/"+f {
			return f
		}
	}
	return ""
}

// maxDenied bounds the files whose opens stay refused by identity.
const maxDenied = 4096

type fileID struct{ dev, ino uint64 }

// removal is a top-level name to remove once the refused open has
// returned (it holds the folder's lock until then), if it still names
// the file fd.
type removal struct {
	name string
	fd   int
	id   fileID
}

// removeRefused removes the names deny hands it, off the answering
// thread.
func (g *topGuard) removeRefused() {
	for r := range g.remove {
		var nst unix.Stat_t
		if unix.Fstatat(g.top, r.name, &nst, unix.AT_SYMLINK_NOFOLLOW) == nil && nst.Dev == r.id.dev && nst.Ino == r.id.ino {
			_ = unix.Unlinkat(g.top, r.name, 0)
		}
		var st unix.Stat_t
		if unix.Fstat(r.fd, &st) == nil && st.Nlink == 0 {
			g.mu.Lock()
			delete(g.denied, r.id)
			g.mu.Unlock()
		}
		unix.Close(r.fd)
	}
}
