package qemu

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/vm"
)

func TestAccelMode(t *testing.T) {
	tests := []struct {
		opt, env, want string
		err            bool
	}{
		{"", "", AccelAuto, false},
		{"", "tcg", AccelTCG, false},
		{"", " KVM ", AccelKVM, false},
		{"kvm", "tcg", AccelKVM, false}, // Options win over the environment
		{"", "hvf", "", true},
		{"fast", "", "", true},
	}
	for _, tt := range tests {
		got, err := accelMode(tt.opt, func(k string) string {
			if k != EnvAccel {
				t.Fatalf("reads %s", k)
			}
			return tt.env
		})
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("accelMode(%q, env %q) = %q, %v", tt.opt, tt.env, got, err)
		}
	}
}

func TestResolveOptions(t *testing.T) {
	noEnv := func(string) string { return "" }
	missing := func(string) (string, error) { return "", errors.New("not found") }
	_, err := resolveOptions(Options{Arch: "arm64"}, noEnv, missing)
	if !errors.Is(err, vm.ErrNoHypervisor) || !contains(err, "apt install qemu-system-arm") {
		t.Errorf("missing arm64 QEMU: %v", err)
	}
	_, err = resolveOptions(Options{Arch: "amd64"}, noEnv, missing)
	if !errors.Is(err, vm.ErrNoHypervisor) || !contains(err, "apt install qemu-system-x86") {
		t.Errorf("missing amd64 QEMU: %v", err)
	}
	found := func(n string) (string, error) { return "/usr/bin/" + n, nil }
	r, err := resolveOptions(Options{Arch: "arm64", CacheDir: "/c"}, noEnv, found)
	if err != nil || r.QEMU != "/usr/bin/qemu-system-aarch64" || r.Share != ShareAuto || r.accelMode != AccelAuto || r.ProbeTimeout == 0 {
		t.Errorf("resolve = %+v, %v", r, err)
	}
	for _, bad := range []Options{{Arch: "riscv64"}, {Share: "nfs"}, {Accel: "whp"}} {
		if _, err := resolveOptions(bad, noEnv, found); !errors.Is(err, vm.ErrInvalidConfig) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
}

func contains(err error, s string) bool { return err != nil && strings.Contains(err.Error(), s) }

func TestChooseShare(t *testing.T) {
	rw, ro := &vm.Share{HostPath: "/p"}, &vm.Share{HostPath: "/p", ReadOnly: true}
	const fsd = "/usr/lib/qemu/virtiofsd"
	tests := []struct {
		name      string
		share     *vm.Share
		mode, fsd string
		root      bool
		want      string
		err       bool
	}{
		{"none", nil, ShareAuto, fsd, true, "", false},
		{"rw root", rw, ShareAuto, fsd, true, ShareVirtiofs, false},
		{"rw user", rw, ShareAuto, fsd, false, Share9P, false},
		{"rw no virtiofsd", rw, ShareAuto, "", true, Share9P, false},
		{"ro root", ro, ShareAuto, fsd, true, Share9P, false},
		{"ro forced virtiofs", ro, ShareVirtiofs, fsd, true, "", true},
		{"forced 9p", rw, Share9P, fsd, true, Share9P, false},
		{"forced virtiofs user", rw, ShareVirtiofs, fsd, false, ShareVirtiofs, false},
		{"forced virtiofs missing", rw, ShareVirtiofs, "", true, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := chooseShare(tt.share, tt.mode, tt.fsd, tt.root)
			if (err != nil) != tt.err || got != tt.want {
				t.Errorf("got %q, %v", got, err)
			}
		})
	}
	if securityModel(true) != "passthrough" || securityModel(false) != "none" {
		t.Error("security model")
	}
}

func TestCheckFile(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "k")
	os.WriteFile(f, []byte("x"), 0o644)
	if err := checkFile("kernel", f); err != nil {
		t.Error(err)
	}
	for _, p := range []string{dir, filepath.Join(dir, "none")} {
		if err := checkFile("kernel", p); !errors.Is(err, vm.ErrInvalidConfig) {
			t.Errorf("%s: %v", p, err)
		}
	}
}
