package boot

import (
	"reflect"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/guest/api"
)

func TestParseModules(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		paths    []string
		problems int
		err      bool
	}{
		{"empty", "", nil, 0, false},
		// The list of a kernel with every driver built in (-kernel source).
		{"built-in kernel", "# 6.1.192-airlock: every driver is built in; nothing to load\n", nil, 0, false},
		{"ordered", "/lib/modules/6.1/a.ko\n\n# comment\n  /lib/modules/6.1/b.ko.xz  \n", []string{"/lib/modules/6.1/a.ko", "/lib/modules/6.1/b.ko.xz"}, 0, false},
		{"relative and unclean skipped", "a.ko\n/lib/../x.ko\n/ok.ko\n/with space.ko\n", []string{"/ok.ko"}, 3, false},
		{"no trailing newline", "/a.ko", []string{"/a.ko"}, 0, false},
		{"line too long", "/" + strings.Repeat("a", 5000) + "\n", nil, 0, true},
		{"too many", strings.Repeat("/a.ko\n", maxModules+1), nil, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			paths, problems, err := ParseModules(strings.NewReader(tt.in))
			if (err != nil) != tt.err {
				t.Fatalf("err = %v", err)
			}
			if tt.err {
				return
			}
			if !reflect.DeepEqual(paths, tt.paths) || len(problems) != tt.problems {
				t.Errorf("paths %q problems %q", paths, problems)
			}
		})
	}
}

func TestCompressed(t *testing.T) {
	for p, want := range map[string]bool{"/a.ko": false, "/a.ko.xz": true, "/a.ko.zst": true, "/a.ko.gz": true, "/ko.xz/a.ko": false} {
		if got := compressed(p); got != want {
			t.Errorf("compressed(%q) = %v", p, got)
		}
	}
}

// imageModules is the image's load list (images/out/amd64, kernel 6.1),
// by name, in order.
var imageModules = strings.Fields(`virtio_pci_legacy_dev virtio_pci_modern_dev virtio_ring virtio virtio_pci
	virtio_mmio virtio_console virtio-rng virtio_balloon fuse virtiofs 9pnet netfs fscache 9p 9pnet_virtio
	9pnet_fd vsock vmw_vsock_virtio_transport_common vmw_vsock_virtio_transport hv_vmbus hv_sock virtio_blk
	crc16 mbcache jbd2 ext4 crc32c_generic overlay scsi_common scsi_mod scsi_transport_fc hv_storvsc crc64
	crc64-rocksoft crct10dif_common crc-t10dif t10-pi sd_mod`)

func TestModuleNeeded(t *testing.T) {
	base := "virtio_pci_legacy_dev virtio_pci_modern_dev virtio_ring virtio virtio_pci virtio_mmio virtio_console virtio_rng virtio_balloon"
	tests := []struct {
		name string
		cfg  api.BootConfig
		want string
	}{
		{"serial, virtiofs (QEMU without vhost-vsock)", api.BootConfig{Transport: api.TransportSerial, Share: api.ShareVirtiofs}, base + " fuse virtiofs"},
		{"serial, 9p", api.BootConfig{Transport: api.TransportSerial, Share: api.Share9P}, base + " 9pnet netfs fscache 9p 9pnet_virtio"},
		{"serial, no share", api.BootConfig{Transport: api.TransportSerial}, base},
		{"vsock, virtiofs (vz)", api.BootConfig{Transport: api.TransportVsock, Share: api.ShareVirtiofs}, base + " fuse virtiofs vsock vmw_vsock_virtio_transport_common vmw_vsock_virtio_transport"},
		{"default transport is vsock", api.BootConfig{}, base + " vsock vmw_vsock_virtio_transport_common vmw_vsock_virtio_transport"},
		{"hvsock, 9p over vsock (HCS)", api.BootConfig{Transport: api.TransportHVSock, Share: api.Share9PVsock}, base + " 9pnet netfs fscache 9p 9pnet_fd vsock hv_vmbus hv_sock"},
		{"root disk (standard image, QEMU)", api.BootConfig{Transport: api.TransportSerial, Share: api.ShareVirtiofs, Root: "airlock-std"},
			base + " fuse virtiofs hv_vmbus virtio_blk crc16 mbcache jbd2 ext4 crc32c_generic overlay scsi_common scsi_mod scsi_transport_fc hv_storvsc crc64 crc64_rocksoft crct10dif_common crc_t10dif t10_pi sd_mod"},
		{"changes held (a layer disk, QEMU)", api.BootConfig{Transport: api.TransportSerial, Share: api.Share9P, ShareReadOnly: true, Changes: true},
			base + " 9pnet netfs fscache 9p 9pnet_virtio hv_vmbus virtio_blk crc16 mbcache jbd2 ext4 crc32c_generic overlay scsi_common scsi_mod scsi_transport_fc hv_storvsc crc64 crc64_rocksoft crct10dif_common crc_t10dif t10_pi sd_mod"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, m := range imageModules {
				if ModuleNeeded("/lib/modules/6.1.0-57-amd64/kernel/x/"+m+".ko", tt.cfg) {
					got = append(got, ModuleName(m+".ko"))
				}
			}
			if strings.Join(got, " ") != tt.want {
				t.Errorf("loaded\n  %s\nwant\n  %s", strings.Join(got, " "), tt.want)
			}
		})
	}
	if ModuleName("/a/b/virtio-rng.ko.xz") != "virtio_rng" {
		t.Error("ModuleName does not strip the suffix or fold '-'")
	}
}

// TestSplitLate: a parked guest with a layer disk loads virtio_blk only
// after the wake (no disk read goes into a template); any other boot loads
// everything at once.
func TestSplitLate(t *testing.T) {
	paths := []string{"/m/virtio.ko", "/m/virtio_blk.ko.xz", "/m/ext4.ko", "/m/overlay.ko"}
	parked := api.BootConfig{Transport: api.TransportSerial, Share: api.Share9P, ShareReadOnly: true, Changes: true, Park: true}
	now, late := SplitLate(paths, parked)
	if strings.Join(now, " ") != "/m/virtio.ko /m/ext4.ko /m/overlay.ko" || strings.Join(late, " ") != "/m/virtio_blk.ko.xz" {
		t.Errorf("parked: now %v, late %v", now, late)
	}
	for _, cfg := range []api.BootConfig{{Park: true}, {Changes: true}} {
		if now, late := SplitLate(paths, cfg); len(now) != len(paths) || late != nil {
			t.Errorf("%+v: now %v, late %v", cfg, now, late)
		}
	}
}
