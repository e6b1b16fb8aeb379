package boot

import (
	"strings"
	"testing"

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
