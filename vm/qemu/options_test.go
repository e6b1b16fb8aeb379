package qemu

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
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

func TestMachineMode(t *testing.T) {
	tests := []struct {
		opt, arch, env, want string
		err                  string
	}{
		{"", "amd64", "", MachineAuto, ""},
		{"", "amd64", " Q35 ", MachineQ35, ""},
		{"", "amd64", "microvm", MachineMicrovm, ""},
		{"q35", "amd64", "microvm", MachineQ35, ""}, // Options win over the environment
		{"auto", "arm64", "", MachineAuto, ""},
		{"", "arm64", "q35", "", "virt machine"},
		{"microvm", "arm64", "", "", "virt machine"},
		{"", "amd64", "pc", "", "want auto, q35 or microvm"},
		{"virt", "amd64", "", "", "want auto, q35 or microvm"},
	}
	for _, tt := range tests {
		got, err := machineMode(tt.opt, tt.arch, func(k string) string {
			if k != EnvMachine {
				t.Fatalf("reads %s", k)
			}
			return tt.env
		})
		if got != tt.want || (tt.err == "") != (err == nil) || (err != nil && (!contains(err, tt.err) || !errors.Is(err, vm.ErrInvalidConfig))) {
			t.Errorf("machineMode(%q, %s, env %q) = %q, %v", tt.opt, tt.arch, tt.env, got, err)
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
	if r.Machine != MachineAuto {
		t.Errorf("machine %q, want auto", r.Machine)
	}
	for _, bad := range []Options{{Arch: "riscv64"}, {Share: "nfs"}, {Accel: "whp"}, {Machine: "pc"}, {Arch: "arm64", Machine: "q35"}} {
		if _, err := resolveOptions(bad, noEnv, found); !errors.Is(err, vm.ErrInvalidConfig) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
}

func contains(err error, s string) bool { return err != nil && strings.Contains(err.Error(), s) }

// TestChooseShare is the decision table of who serves the share: over
// Airlock run as root or a user, the folder's owner, read-only and the
// requested mode. Whatever serves a writable share as root must not be
// root (or must keep host files plain).
func TestChooseShare(t *testing.T) {
	rw, ro := &vm.Share{HostPath: "/p"}, &vm.Share{HostPath: "/p", ReadOnly: true}
	const fsd = "/usr/lib/qemu/virtiofsd"
	const root, user = 0, 1000
	alice, rootOwner := hostUser{UID: 1000, GID: 1000}, hostUser{}
	plain9p := sharePlan{FS: Share9P, SecurityModel: modelNone}
	asAlice := sharePlan{FS: Share9P, SecurityModel: modelNone, RunAs: &alice}
	xattr := sharePlan{FS: Share9P, SecurityModel: modelMappedXattr}
	tests := []struct {
		name      string
		share     *vm.Share
		mode, fsd string
		euid      int
		owner     hostUser
		want      sharePlan
		errHas    string
	}{
		{"no share", nil, ShareAuto, fsd, root, alice, sharePlan{}, ""},
		// Airlock as a user (the desktop): QEMU's 9p as that user.
		{"user, own folder", rw, ShareAuto, fsd, user, alice, plain9p, ""},
		{"user, read-only", ro, ShareAuto, fsd, user, alice, plain9p, ""},
		{"user, no virtiofsd", rw, ShareAuto, "", user, alice, plain9p, ""},
		{"user, forced 9p", rw, Share9P, fsd, user, alice, plain9p, ""},
		{"user, forced virtiofs", rw, ShareVirtiofs, fsd, user, alice, sharePlan{FS: ShareVirtiofs}, ""},
		{"user, forced virtiofs, none installed", rw, ShareVirtiofs, "", user, alice, sharePlan{}, "virtiofsd not found"},
		// Airlock as root, a user's folder: QEMU as the folder's owner.
		{"root, user's folder", rw, ShareAuto, fsd, root, alice, asAlice, ""},
		{"root, user's folder, no virtiofsd", rw, ShareAuto, "", root, alice, asAlice, ""},
		{"root, user's folder, forced 9p", rw, Share9P, fsd, root, alice, asAlice, ""},
		{"root, user's folder, read-only", ro, ShareAuto, fsd, root, alice, asAlice, ""},
		// Airlock as root, root's folder: guest metadata in xattrs.
		{"root, root's folder", rw, ShareAuto, fsd, root, rootOwner, xattr, ""},
		{"root, root's folder, forced 9p", rw, Share9P, fsd, root, rootOwner, xattr, ""},
		{"root, root's folder, read-only", ro, ShareAuto, fsd, root, rootOwner, sharePlan{FS: Share9P, SecurityModel: modelPassthrough}, ""},
		// virtiofsd as root applies the guest's owners and modes: refused.
		{"root, user's folder, forced virtiofs", rw, ShareVirtiofs, fsd, root, alice, sharePlan{}, "setuid-root"},
		{"root, root's folder, forced virtiofs", rw, ShareVirtiofs, fsd, root, rootOwner, sharePlan{}, "setuid-root"},
		{"read-only virtiofs", ro, ShareVirtiofs, fsd, user, alice, sharePlan{}, "needs 9p"},
		{"read-only virtiofs as root", ro, ShareVirtiofs, fsd, root, alice, sharePlan{}, "needs 9p"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// TrustedVirtiofs changes nothing but a writable virtiofs
			// share as root, which it serves.
			trusted, terr := chooseShare(tt.share, tt.mode, tt.fsd, tt.euid, tt.owner, true)
			got, err := chooseShare(tt.share, tt.mode, tt.fsd, tt.euid, tt.owner, false)
			switch {
			case tt.errHas == "setuid-root":
				if terr != nil || !reflect.DeepEqual(trusted, sharePlan{FS: ShareVirtiofs}) {
					t.Errorf("trusted: %+v, %v; want virtiofs", trusted, terr)
				}
			case fmt.Sprint(terr) != fmt.Sprint(err) || !reflect.DeepEqual(trusted, got):
				t.Errorf("trusted: %+v, %v; want %+v, %v as untrusted", trusted, terr, got, err)
			}
			if tt.errHas != "" {
				if !errors.Is(err, vm.ErrInvalidConfig) || !contains(err, tt.errHas) {
					t.Fatalf("err %v, want ErrInvalidConfig saying %q", err, tt.errHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v (run as %v), want %+v (run as %v)", got, got.RunAs, tt.want, tt.want.RunAs)
			}
			// The invariant behind the table: a writable share served as
			// root never applies the guest's owners and modes to the host.
			if tt.share != nil && !tt.share.ReadOnly && tt.euid == 0 && got.RunAs == nil && got.SecurityModel != modelMappedXattr {
				t.Errorf("a writable share served by root with %+v", got)
			}
		})
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

// TestReadableBy: what QEMU, started as the folder's owner, can reopen
// through /proc/self/fd (the file's own bits count, not its folder's).
func TestReadableBy(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to give files away")
	}
	dir := t.TempDir()
	alice := hostUser{UID: 1000, GID: 1000}
	tests := []struct {
		name     string
		uid, gid int
		mode     os.FileMode
		want     bool
	}{
		{"world-readable image", 0, 0, 0o644, true},
		{"root's private file", 0, 0, 0o600, false},
		{"the owner's own file", 1000, 1000, 0o600, true},
		{"the owner's file without read", 1000, 1000, 0o200, false},
		{"the owner's group", 0, 1000, 0o640, true},
		{"another group", 0, 0, 0o640, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "-"))
			os.WriteFile(f, nil, tt.mode)
			os.Chmod(f, tt.mode)
			os.Chown(f, tt.uid, tt.gid)
			fi, err := os.Stat(f)
			if err != nil {
				t.Fatal(err)
			}
			if got := readableBy(fi, alice); got != tt.want {
				t.Errorf("readableBy(%v %d:%d) = %v", fi.Mode(), tt.uid, tt.gid, got)
			}
		})
	}
}
