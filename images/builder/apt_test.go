package builder

import (
	"strings"
	"testing"
)

func TestKernelDependency(t *testing.T) {
	tests := []struct {
		name, out, meta, want string
	}{
		{"native", "linux-image-amd64\n  Depends: linux-image-6.1.0-57-amd64\n", "linux-image-amd64", "linux-image-6.1.0-57-amd64"},
		{"foreign", "linux-image-arm64:arm64\n  Depends: linux-image-6.1.0-57-arm64:arm64\n", "linux-image-arm64", "linux-image-6.1.0-57-arm64"},
		{"alternatives and virtual", "linux-image-amd64\n |Depends: <linux-image-6.1.0-9-amd64>\n  Depends: foo\n", "linux-image-amd64", "linux-image-6.1.0-9-amd64"},
		{"only other dependencies", "linux-image-amd64\n  Recommends: firmware\n  Depends: initramfs-tools\n", "linux-image-amd64", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := kernelDependency([]byte(tt.out), tt.meta); got != tt.want {
				t.Errorf("kernelDependency = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestParseControl(t *testing.T) {
	out := `Package: busybox-static
Architecture: arm64
Version: 1:1.35.0-4+deb12u1+b1
Depends: libc6
Description-en: Standalone rescue shell
 with tons of builtin utilities
SHA256: 3d3fdbe91d4660c873e14b092c213fe81c1da6362daa236eb25d0171eb108744

Package: busybox-static
Version: 1:1.30.0-1
`
	p, err := parseControl([]byte(out))
	if err != nil {
		t.Fatalf("parseControl: %v", err)
	}
	if p.Name != "busybox-static" || p.Arch != "arm64" || p.Version != "1:1.35.0-4+deb12u1+b1" || !strings.HasPrefix(p.IndexSHA256, "3d3fdbe9") {
		t.Errorf("parseControl = %+v", p)
	}
	if got, want := p.cacheName(), "busybox-static_1%3a1.35.0-4+deb12u1+b1_arm64.deb"; got != want {
		t.Errorf("cacheName = %q, want %q (apt-get download's name)", got, want)
	}
	if _, err := parseControl([]byte("Package: x\nVersion: 1\n")); err == nil {
		t.Error("parseControl accepted a stanza without Architecture and SHA256")
	}
}
