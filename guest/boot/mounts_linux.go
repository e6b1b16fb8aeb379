package boot

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

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
	if cfg.Changes {
		return mountChanges(log, cfg)
	}
	if err := mountShare(log, cfg, func(*mount) {}); err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	return nil
}

// mountShare mounts cfg's share as workspaceMount says, changed by
// adjust. A 9p-vsock share is dialled and mounted again for up to
// shareWait while the host's Plan9 server is not there yet (retryShare).
func mountShare(log *slog.Logger, cfg api.BootConfig, adjust func(*mount)) error {
	mountOver := func(fd int) error {
		m, err := workspaceMount(cfg, fd)
		if err != nil {
			return err
		}
		adjust(&m)
		return m.do()
	}
	if cfg.Share != api.Share9PVsock {
		return mountOver(-1)
	}
	dial := func() (int, error) {
		fd, err := dialVsock(cfg.SharePort)
		if err != nil {
			return -1, fmt.Errorf("9p over vsock port %d: %w", cfg.SharePort, err)
		}
		return fd, nil
	}
	return retryShare(log, shareWait, dial, mountOver)
}

// shareWait bounds how long init retries the workspace's Plan9 connection
// on HCS. The service adds the share (HcsModifyComputeSystem, with the
// user's token) only after HcsStartComputeSystem returns, so a guest that
// boots fast can dial port 564 before the host's Plan9 server serves the
// share: the connection is refused or times out, or it is made and the
// attach of a share name not yet known fails. Past this bound, well
// within the host's boot timeout, a failure is the share's own and the
// host reports it as hcs.ErrPlan9Mount. QEMU's share is there at boot:
// its first attempt succeeds and nothing waits.
const shareWait = 20 * time.Second

// shareRetryable says whether err, from dialling the host's Plan9 server
// or mounting over the connection, can mean the share is not there yet.
func shareRetryable(err error) bool {
	for _, e := range []unix.Errno{
		unix.ECONNREFUSED, unix.ECONNRESET, unix.ETIMEDOUT, unix.EHOSTUNREACH, unix.ENETUNREACH,
		unix.ENOENT, unix.EPIPE, unix.EIO,
	} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// retryShare dials the share and mounts over the connection, again after
// a short and growing pause while either fails with a shareRetryable
// error, until wait has passed. The socket is closed after each attempt:
// a mounted 9p holds its own reference to it.
func retryShare(log *slog.Logger, wait time.Duration, dial func() (int, error), mountOver func(fd int) error) error {
	began := time.Now()
	pause := 10 * time.Millisecond
	for attempt := 1; ; attempt++ {
		fd, err := dial()
		if err == nil {
			err = mountOver(fd)
			unix.Close(fd)
		}
		if err == nil {
			if attempt > 1 {
				log.Info("workspace share answered", "attempts", attempt, "after", time.Since(began).Round(time.Millisecond).String())
			}
			return nil
		}
		if !shareRetryable(err) {
			return err
		}
		left := wait - time.Since(began)
		if left <= 0 {
			return fmt.Errorf("%w (still failing after %d attempts in %v)", err, attempt, time.Since(began).Round(time.Millisecond))
		}
		if attempt == 1 {
			log.Info("workspace share not there yet; retrying", "err", err.Error(), "for", wait.String())
		}
		time.Sleep(min(pause, left))
		pause = min(2*pause, 500*time.Millisecond)
	}
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
