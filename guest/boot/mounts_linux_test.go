package boot

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/guest/api"
)

func TestWorkspaceMount(t *testing.T) {
	tests := []struct {
		name   string
		cfg    api.BootConfig
		fstype string
		data   string
		ro     bool
		err    bool
	}{
		{"virtiofs", api.BootConfig{Share: api.ShareVirtiofs}, "virtiofs", "", false, false},
		{"virtiofs read-only", api.BootConfig{Share: api.ShareVirtiofs, ShareReadOnly: true}, "virtiofs", "", true, false},
		{"9p", api.BootConfig{Share: api.Share9P}, "9p", "trans=virtio,version=9p2000.L,msize=512000,cache=mmap", false, false},
		{"9p over vsock", api.BootConfig{Share: api.Share9PVsock, SharePort: 564}, "9p", "trans=fd,rfdno=7,wfdno=7,version=9p2000.L", false, false},
		{"none", api.BootConfig{}, "", "", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := workspaceMount(tt.cfg, 7)
			if (err != nil) != tt.err {
				t.Fatalf("err = %v", err)
			}
			if tt.err {
				return
			}
			if m.source != api.WorkspaceTag || m.target != api.WorkspaceDir || m.fstype != tt.fstype || !strings.HasPrefix(m.data, tt.data) {
				t.Errorf("mount = %+v", m)
			}
			if got := m.flags&unix.MS_RDONLY != 0; got != tt.ro {
				t.Errorf("read-only = %v", got)
			}
			if m.flags&(unix.MS_NOSUID|unix.MS_NODEV) != unix.MS_NOSUID|unix.MS_NODEV {
				t.Errorf("workspace allows setuid or devices: %#x", m.flags)
			}
		})
	}
}

// fakeShare is a Plan9 server the host adds after the guest first dials:
// refused dials, then accepted connections whose attach fails, then the
// share. Each connection is a real descriptor (of /dev/null), so the
// test sees retryShare close them.
type fakeShare struct {
	refuse, unknown int // dials refused, then mounts failing with ENOENT
	mountErr        error
	dials, mounts   int
	fds             []int
}

func (f *fakeShare) dial() (int, error) {
	f.dials++
	if f.dials <= f.refuse {
		return -1, fmt.Errorf("9p over vsock port 564: %w", unix.ECONNREFUSED)
	}
	fd, err := unix.Open("/dev/null", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	f.fds = append(f.fds, fd)
	return fd, nil
}

func (f *fakeShare) mount(fd int) error {
	f.mounts++
	if f.fds[len(f.fds)-1] != fd {
		return fmt.Errorf("mounted over fd %d, dialled %d", fd, f.fds[len(f.fds)-1])
	}
	if f.mounts <= f.unknown {
		return fmt.Errorf("mount 9p on /workspace: %w", unix.ENOENT)
	}
	return f.mountErr
}

func (f *fakeShare) allClosed(t *testing.T) {
	t.Helper()
	for _, fd := range f.fds {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != unix.EBADF {
			t.Errorf("fd %d still open after its attempt", fd)
		}
	}
}

func TestRetryShare(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	t.Run("waits for the host to add the share", func(t *testing.T) {
		f := &fakeShare{refuse: 3, unknown: 2}
		if err := retryShare(log, 10*time.Second, f.dial, f.mount); err != nil {
			t.Fatal(err)
		}
		if f.dials != 6 || f.mounts != 3 {
			t.Errorf("%d dials, %d mounts; want 6 and 3", f.dials, f.mounts)
		}
		f.allClosed(t)
	})
	t.Run("a share there at once is mounted at once", func(t *testing.T) {
		f := &fakeShare{}
		began := time.Now()
		if err := retryShare(log, 10*time.Second, f.dial, f.mount); err != nil {
			t.Fatal(err)
		}
		if f.dials != 1 || time.Since(began) > time.Second {
			t.Errorf("%d dials in %v", f.dials, time.Since(began))
		}
		f.allClosed(t)
	})
	t.Run("gives up after the bound", func(t *testing.T) {
		f := &fakeShare{refuse: 1 << 30}
		began := time.Now()
		err := retryShare(log, 300*time.Millisecond, f.dial, f.mount)
		took := time.Since(began)
		if !errors.Is(err, unix.ECONNREFUSED) || !strings.Contains(err.Error(), "still failing after") {
			t.Fatalf("err = %v", err)
		}
		if took < 300*time.Millisecond || took > 3*time.Second || f.dials < 3 {
			t.Errorf("gave up after %v and %d dials", took, f.dials)
		}
	})
	t.Run("a real failure is not retried", func(t *testing.T) {
		f := &fakeShare{mountErr: fmt.Errorf("mount 9p on /workspace: %w", unix.EINVAL)}
		err := retryShare(log, 10*time.Second, f.dial, f.mount)
		if !errors.Is(err, unix.EINVAL) || f.dials != 1 {
			t.Fatalf("err = %v after %d dials", err, f.dials)
		}
		f.allClosed(t)
	})
}
