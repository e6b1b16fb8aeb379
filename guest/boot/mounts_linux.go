package boot

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/guest/api"
)

// mount is one mount(2) call.
type mount struct {
	source, target, fstype string
	flags                  uintptr
	data                   string
	mode                   os.FileMode // of target when it has to be created
}

const nodevSuid = unix.MS_NOSUID | unix.MS_NODEV

// earlyMounts are the kernel file systems every guest needs, in order.
var earlyMounts = []mount{
	{"proc", "/proc", "proc", nodevSuid | unix.MS_NOEXEC, "", 0o555},
	{"sysfs", "/sys", "sysfs", nodevSuid | unix.MS_NOEXEC, "", 0o555},
	{"devtmpfs", "/dev", "devtmpfs", unix.MS_NOSUID, "mode=0755", 0o755},
	{"devpts", "/dev/pts", "devpts", unix.MS_NOSUID | unix.MS_NOEXEC, "gid=5,mode=0620,ptmxmode=0666", 0o755},
	{"tmpfs", "/dev/shm", "tmpfs", nodevSuid, "mode=1777", 0o1777},
	{"tmpfs", "/tmp", "tmpfs", nodevSuid, "mode=1777", 0o1777},
	{"tmpfs", "/run", "tmpfs", nodevSuid, "mode=0755", 0o755},
	{"cgroup2", "/sys/fs/cgroup", "cgroup2", nodevSuid | unix.MS_NOEXEC, "", 0o555},
}

// 9p options: cache=mmap keeps no page cache for read and write (only for
// mmap), so the host's changes are seen at once and the guest's writes
// reach the host before write(2) returns; "loose" would serve stale data.
const (
	ninePOptions  = "version=9p2000.L,msize=512000,cache=mmap,access=client"
	ninePFdMsize  = 65536 // the Hyper-V Plan9 server's limit
	workspaceMode = 0o755
)

// workspaceMount is the mount for cfg's share. fd is the connected socket
// of a 9p-vsock share (ignored otherwise).
func workspaceMount(cfg api.BootConfig, fd int) (mount, error) {
	m := mount{target: api.WorkspaceDir, flags: nodevSuid, mode: workspaceMode}
	if cfg.ShareReadOnly {
		m.flags |= unix.MS_RDONLY
	}
	switch cfg.Share {
	case api.ShareVirtiofs:
		m.source, m.fstype = api.WorkspaceTag, "virtiofs"
	case api.Share9P:
		m.source, m.fstype = api.WorkspaceTag, "9p"
		m.data = "trans=virtio," + ninePOptions
	case api.Share9PVsock:
		m.source, m.fstype = api.WorkspaceTag, "9p"
		m.data = fmt.Sprintf("trans=fd,rfdno=%d,wfdno=%d,version=9p2000.L,msize=%d,cache=mmap,access=client,aname=%s",
			fd, fd, ninePFdMsize, api.WorkspaceTag)
	default:
		return m, fmt.Errorf("no share to mount (%q)", cfg.Share)
	}
	return m, nil
}

func (m mount) do() error {
	if err := os.MkdirAll(m.target, m.mode|0o700); err != nil {
		return fmt.Errorf("mount %s: %w", m.target, err)
	}
	err := unix.Mount(m.source, m.target, m.fstype, m.flags, m.data)
	if err != nil {
		return fmt.Errorf("mount %s on %s: %w", m.fstype, m.target, err)
	}
	return nil
}

// mountEarly mounts the kernel file systems. An already mounted one (a
// kernel with CONFIG_DEVTMPFS_MOUNT) is fine.
func mountEarly() error {
	for _, m := range earlyMounts {
		if err := m.do(); err != nil && !errors.Is(err, unix.EBUSY) {
			if m.fstype == "cgroup2" {
				continue // tasks then lose their cgroups; the agent says so
			}
			return err
		}
	}
	// Shells and tools expect these names.
	for link, target := range map[string]string{
		"/dev/fd": "/proc/self/fd", "/dev/stdin": "/proc/self/fd/0",
		"/dev/stdout": "/proc/self/fd/1", "/dev/stderr": "/proc/self/fd/2",
	} {
		_ = os.Symlink(target, link)
	}
	if _, err := os.Stat("/dev/ptmx"); err != nil {
		_ = os.Symlink("pts/ptmx", "/dev/ptmx")
	}
	return nil
}

// setupCgroups creates the subtree the agent puts tasks in and enables
// the controllers the kernel offers there, so limits can be set per task.
func setupCgroups(root string) error {
	b, err := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
	if err != nil {
		return fmt.Errorf("cgroup2: %w", err)
	}
	var enable []string
	for _, c := range strings.Fields(string(b)) {
		switch c {
		case "cpu", "memory", "pids", "io":
			enable = append(enable, "+"+c)
		}
	}
	dir := root
	for _, sub := range []string{"", "airlock", "tasks"} {
		dir = filepath.Join(dir, sub)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("cgroup2: %w", err)
		}
		if len(enable) > 0 {
			// Best effort: a controller the kernel refuses only loses limits.
			_ = os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(strings.Join(enable, " ")), 0)
		}
	}
	return nil
}

// mountWorkspace mounts the shared folder, or with changes held the
// overlay over it (mountChanges).
func mountWorkspace(log *slog.Logger, cfg api.BootConfig) error {
	fd := -1
	if cfg.Share == api.Share9PVsock {
		var err error
		if fd, err = dialVsock(cfg.SharePort); err != nil {
			return fmt.Errorf("workspace: 9p over vsock port %d: %w", cfg.SharePort, err)
		}
		// The kernel holds its own references once mounted.
		defer unix.Close(fd)
	}
	if cfg.Changes {
		return mountChanges(log, cfg, fd)
	}
	m, err := workspaceMount(cfg, fd)
	if err != nil {
		return err
	}
	if err := m.do(); err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	return nil
}

func dialVsock(port uint32) (int, error) {
	if port == 0 {
		return -1, errors.New("no airlock.share_port on the kernel command line")
	}
	fd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM, 0)
	if err != nil {
		return -1, err
	}
	if err := unix.Connect(fd, &unix.SockaddrVM{CID: unix.VMADDR_CID_HOST, Port: port}); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// unmountWorkspace unmounts the shared folder, lazily if still busy, and
// with changes held what lies beneath its overlay.
func unmountWorkspace(cfg api.BootConfig) error {
	err := unix.Unmount(api.WorkspaceDir, 0)
	if errors.Is(err, unix.EBUSY) {
		err = unix.Unmount(api.WorkspaceDir, unix.MNT_DETACH)
	}
	if errors.Is(err, unix.EINVAL) { // not mounted
		err = nil
	}
	if cfg.Changes {
		err = errors.Join(err, unmountChanges())
	}
	return err
}
