package qemu

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"time"

	"github.com/airlock-sandbox/airlock/vm"
)

// Options tune the QEMU backend. The zero value picks everything.
type Options struct {
	// Arch is the guest architecture, "amd64" or "arm64"; empty means the
	// host's. A foreign architecture always runs under TCG.
	Arch string
	// Accel is "auto", "kvm" or "tcg"; empty means $AIRLOCK_ACCEL, else
	// auto. Auto uses KVM only when a probe VM runs under it in time.
	Accel string
	// QEMU is the system emulator; empty means qemu-system-x86_64 or
	// qemu-system-aarch64 from PATH.
	QEMU string
	// Virtiofsd is the virtio-fs daemon; empty means /usr/lib/qemu/virtiofsd
	// or /usr/libexec/virtiofsd.
	Virtiofsd string
	// Share is "auto", "virtiofs" or "9p". Auto uses virtiofs for a
	// read-write share when virtiofsd can run (as root), else 9p. Read-only
	// shares always use 9p, whose read-only mode QEMU enforces.
	Share string
	// CacheDir holds the KVM probe verdict; empty means
	// os.UserCacheDir()/airlock.
	CacheDir string
	// ProbeTimeout bounds the KVM probe (default 2s).
	ProbeTimeout time.Duration
}

// Share choices in Options.Share.
const (
	ShareAuto     = "auto"
	ShareVirtiofs = "virtiofs"
	Share9P       = "9p"
)

var virtiofsdPaths = []string{"/usr/lib/qemu/virtiofsd", "/usr/libexec/virtiofsd"}

func hostArch() string { return runtime.GOARCH }

// resolved is Options with every default applied.
type resolved struct {
	Options
	accelMode string
}

func resolveOptions(o Options, getenv func(string) string, lookPath func(string) (string, error)) (resolved, error) {
	r := resolved{Options: o}
	if r.Arch == "" {
		r.Arch = hostArch()
	}
	if r.Arch != "amd64" && r.Arch != "arm64" {
		return r, fmt.Errorf("%w: guest architecture %q: want amd64 or arm64", vm.ErrInvalidConfig, r.Arch)
	}
	mode, err := accelMode(r.Accel, getenv)
	if err != nil {
		return r, err
	}
	r.accelMode = mode
	switch r.Share {
	case "":
		r.Share = ShareAuto
	case ShareAuto, ShareVirtiofs, Share9P:
	default:
		return r, fmt.Errorf("%w: share %q: want auto, virtiofs or 9p", vm.ErrInvalidConfig, r.Share)
	}
	if r.QEMU == "" {
		p, err := lookPath(binaryFor(r.Arch))
		if err != nil {
			return r, fmt.Errorf("%w: %s not found: install QEMU (apt install %s)", vm.ErrNoHypervisor, binaryFor(r.Arch), packageFor(r.Arch))
		}
		r.QEMU = p
	} else if _, err := os.Stat(r.QEMU); err != nil {
		return r, fmt.Errorf("%w: QEMU binary %s: %w (apt install %s)", vm.ErrNoHypervisor, r.QEMU, err, packageFor(r.Arch))
	}
	if r.Virtiofsd == "" {
		for _, p := range virtiofsdPaths {
			if _, err := os.Stat(p); err == nil {
				r.Virtiofsd = p
				break
			}
		}
	}
	if r.CacheDir == "" {
		if d, err := os.UserCacheDir(); err == nil {
			r.CacheDir = filepath.Join(d, "airlock")
		}
	}
	if r.ProbeTimeout <= 0 {
		r.ProbeTimeout = 2 * time.Second
	}
	return r, nil
}

// chooseShare picks how the share reaches the guest. root says whether
// this process (and so QEMU and virtiofsd) runs as root.
func chooseShare(s *vm.Share, mode, virtiofsd string, root bool) (string, error) {
	if s == nil {
		return "", nil
	}
	switch {
	case s.ReadOnly && mode == ShareVirtiofs:
		return "", fmt.Errorf("%w: a read-only share needs 9p: virtiofsd has no read-only mode", vm.ErrInvalidConfig)
	case s.ReadOnly, mode == Share9P:
		return Share9P, nil
	case mode == ShareVirtiofs && virtiofsd == "":
		return "", fmt.Errorf("%w: virtiofsd not found in %v (apt install qemu-system-common)", vm.ErrInvalidConfig, virtiofsdPaths)
	case mode == ShareVirtiofs:
		return ShareVirtiofs, nil
	case virtiofsd != "" && root:
		return ShareVirtiofs, nil
	}
	return Share9P, nil
}

// securityModel is the 9p security model for QEMU running as root or not:
// as root, passthrough keeps the guest's owners (guest uid 1000 writes
// files owned by host uid 1000); as a user, none lets QEMU create files as
// that user instead of failing to chown them.
func securityModel(root bool) string {
	if root {
		return "passthrough"
	}
	return "none"
}

var errNotFile = errors.New("not a regular file")

// checkFile gives a clear error for a kernel or initrd that is missing.
func checkFile(what, path string) error {
	fi, err := os.Stat(path)
	if err == nil && !fi.Mode().IsRegular() {
		err = errNotFile
	}
	if err != nil {
		return fmt.Errorf("%w: %s %s: %w (build the guest image first)", vm.ErrInvalidConfig, what, path, err)
	}
	return nil
}

func lookPath(name string) (string, error) { return exec.LookPath(name) }
