package vm

import (
	"errors"
	"testing"
)

func TestValidateDisks(t *testing.T) {
	base := Config{Kernel: "/k", Initrd: "/i", CPUs: 1, MemoryMiB: 256, Dir: "/run/m"}
	for _, tc := range []struct {
		name  string
		disks []Disk
		ok    bool
	}{
		{"none", nil, true},
		{"root and data", []Disk{{Path: "/img/root.vhd", ReadOnly: true, Format: DiskRawVHD}, {Path: "/state/data.img", Format: DiskRaw}}, true},
		{"relative", []Disk{{Path: "root.vhd", Format: DiskRawVHD}}, false},
		{"empty path", []Disk{{Format: DiskRaw}}, false},
		{"no format", []Disk{{Path: "/img/root.vhd"}}, false},
		{"qcow2", []Disk{{Path: "/img/root.qcow2", Format: "qcow2"}}, false},
		{"too many", make([]Disk, MaxDisks+1), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			c.Disks = tc.disks
			err := c.Validate()
			if (err == nil) != tc.ok {
				t.Fatalf("Validate = %v, want ok %t", err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("%v is not ErrInvalidConfig", err)
			}
		})
	}
}
