package builder

import (
	"strings"
	"testing"
)

func TestKernelDependency(t *testing.T) {
	tests := []struct {
		name, out, meta, want string
	}{
		{"Debian 12", "linux-image-6.1.0-57-amd64 (= 6.1.192-3)", "linux-image-amd64", "linux-image-6.1.0-57-amd64"},
		{"arch qualified", "linux-image-6.1.0-57-arm64:arm64 (= 6.1.192-3)", "linux-image-arm64", "linux-image-6.1.0-57-arm64"},
		{"alternatives", "initramfs-tools | linux-initramfs-tool, linux-image-6.1.0-9-amd64-unsigned (= 6.1.27-1) | linux-image-6.1.0-9-amd64", "linux-image-amd64", "linux-image-6.1.0-9-amd64-unsigned"},
		{"no kernel", "initramfs-tools, linux-image-amd64", "linux-image-amd64", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := kernelDependency(tt.out, tt.meta); got != tt.want {
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
	stanzas, err := parseControl([]byte(out))
	if err == nil || !strings.Contains(err.Error(), "without Package, Version, Architecture or SHA256") {
		t.Fatalf("parseControl error %v, want one about the incomplete second stanza", err)
	}
	stanzas, err = parseControl([]byte(strings.Replace(out, "Version: 1:1.30.0-1\n", "Version: 1:1.30.0-1\nArchitecture: amd64\nDepends: libc6 (>= 2.34), linux-image-1 (= 1)\nSHA256: 00\n", 1)))
	if err != nil {
		t.Fatalf("parseControl: %v", err)
	}
	if len(stanzas) != 2 || stanzas[1].Arch != "amd64" || stanzas[1].Depends != "libc6 (>= 2.34), linux-image-1 (= 1)" {
		t.Fatalf("parseControl = %+v, want two stanzas", stanzas)
	}
	p := stanzas[0]
	if p.Name != "busybox-static" || p.Arch != "arm64" || p.Version != "1:1.35.0-4+deb12u1+b1" || !strings.HasPrefix(p.IndexSHA256, "3d3fdbe9") {
		t.Errorf("parseControl = %+v", p)
	}
	if got, want := p.cacheName(), "busybox-static_1%3a1.35.0-4+deb12u1+b1_arm64.deb"; got != want {
		t.Errorf("cacheName = %q, want %q (apt-get download's name)", got, want)
	}
}
