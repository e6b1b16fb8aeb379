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
	// Machine is the x86 machine type: "auto", "q35" or "microvm"; empty
	// means $AIRLOCK_MACHINE, else auto (microvm under TCG where the host's
	// TSC rate is measured, q35 otherwise; see plan.machine). An arm64
	// guest always boots on virt.
	Machine string
	// Virtiofsd is the virtio-fs daemon; empty means /usr/lib/qemu/virtiofsd
	// or /usr/libexec/virtiofsd.
	Virtiofsd string
	// Share is "auto", "virtiofs" or "9p". Auto always means 9p (see
	// chooseShare for who serves it, and why). Virtiofs needs virtiofsd,
	// which runs only as root, and is refused as root for a writable share;
	// read-only shares always use 9p, whose read-only mode QEMU enforces.
	Share string
	// TrustedVirtiofs serves a writable virtiofs share even as root, where
	// virtiofsd applies the guest's owners, modes and device nodes to the
	// host as they are. Only for a guest and a folder that are both the
	// caller's own (the benchmarks' scratch folder, to measure virtiofs on
	// Linux): never for a user's folder. Nothing in the product sets it.
	TrustedVirtiofs bool
	// CacheDir holds the KVM probe verdict and the host's TSC rate;
	// empty means os.UserCacheDir()/airlock.
	CacheDir string
	// ProbeTimeout bounds the KVM probe (default 2s).
	ProbeTimeout time.Duration
	// Templates is "auto" or "off"; empty means $AIRLOCK_TEMPLATES, else
	// auto. Auto boots a guest that can park (Machine.parks) to park,
	// starts it from the template saved by the first such boot when there
	// is one, and saves that template in CacheDir/templates
	// (template.go). Off boots every guest through to ready.
	Templates string
}

// Template choices in Options.Templates and AIRLOCK_TEMPLATES.
const (
	TemplatesAuto = "auto"
	TemplatesOff  = "off"
)

// EnvTemplates overrides Options.Templates when it is empty.
const EnvTemplates = "AIRLOCK_TEMPLATES"

// Machine choices in Options.Machine and AIRLOCK_MACHINE.
const (
	MachineAuto    = "auto"
	MachineQ35     = "q35"
	MachineMicrovm = "microvm"
)

// EnvMachine overrides the machine type when Options.Machine is empty.
const EnvMachine = "AIRLOCK_MACHINE"

// machineMode is the requested machine type for a guest of arch:
// Options.Machine, else $AIRLOCK_MACHINE, else auto.
func machineMode(opt, arch string, getenv func(string) string) (string, error) {
	mode := optOrEnv(opt, EnvMachine, getenv)
	switch mode {
	case "", MachineAuto:
		return MachineAuto, nil
	case MachineQ35, MachineMicrovm:
		if arch != "amd64" {
			return "", fmt.Errorf("%w: machine %q is for amd64 guests; an %s guest boots on QEMU's virt machine (unset %s)",
				vm.ErrInvalidConfig, mode, arch, EnvMachine)
		}
		return mode, nil
	}
	return "", fmt.Errorf("%w: machine %q: want auto, q35 or microvm", vm.ErrInvalidConfig, mode)
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
	if r.Machine, err = machineMode(r.Machine, r.Arch, getenv); err != nil {
		return r, err
	}
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
	switch t := optOrEnv(r.Templates, EnvTemplates, getenv); t {
	case "", TemplatesAuto:
		r.Templates = TemplatesAuto
	case TemplatesOff:
		r.Templates = TemplatesOff
	default:
		return r, fmt.Errorf("%w: templates %q: want auto or off (%s)", vm.ErrInvalidConfig, t, EnvTemplates)
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

// hostUser is a host identity QEMU can be started as.
type hostUser struct{ UID, GID uint32 }

// 9p security models (QEMU's -fsdev security_model).
const (
	// modelNone: files are created, owned and moded as the QEMU process
	// creates them; guest chown and mknod of devices fail, setuid bits land
	// as they are, on files of QEMU's user.
	modelNone = "none"
	// modelPassthrough: the guest's owners and modes are applied to host
	// files (only used read-only).
	modelPassthrough = "passthrough"
	// modelMappedXattr: the guest's owners, modes, device nodes and
	// symlinks are kept in user.virtfs.* xattrs; on the host every file the
	// guest makes is a plain 0600 file (0700 folder) of QEMU's user.
	modelMappedXattr = "mapped-xattr"
)

// sharePlan is how the share reaches the guest, and as whom it is served.
type sharePlan struct {
	FS            string    // "", ShareVirtiofs or Share9P
	SecurityModel string    // 9p: modelNone, modelPassthrough or modelMappedXattr
	RunAs         *hostUser // start QEMU as this user; nil: as this process
}

// chooseShare decides how the share reaches the guest and who serves it.
// euid is this process's effective uid; owner is the shared folder's owner
// (its uid, and the group QEMU would run with).
//
// The guest is hostile, and its root is one flag away (--root, the MCP
// tool's root flag), so whatever serves the share must not be able to do
// more on the host than the folder's owner could:
//
//   - Airlock run as a user (the desktop case): QEMU's 9p server, as that
//     user, security model none. Files the guest writes belong to the user;
//     it cannot chown them to anyone else or make device nodes, because
//     QEMU cannot.
//   - Airlock run as root, a folder owned by a user: the same, with QEMU
//     started as that user (from its first instruction: a QEMU escape gets
//     the owner's rights, not root's).
//   - Airlock run as root, a folder owned by root: 9p with mapped-xattr,
//     QEMU as root. The guest's owners, modes, device nodes and symlinks
//     are stored in xattrs; on the host its files are plain 0600 files, so
//     nothing it makes there is setuid, a device or a link.
//   - virtiofs as root with a writable folder is refused: virtiofsd 7.2
//     runs as root and applies the guest's owners, modes and device nodes
//     to the host as they are (guest root leaves a setuid-root program or a
//     node of the host's disk in the folder), and it cannot run as a user.
//
// Read-only shares are 9p with QEMU's readonly=on in every case; as root
// with a user's folder they are served as that user too.
//
// trusted is Options.TrustedVirtiofs: it lifts only the refusal of a
// writable virtiofs share as root.
func chooseShare(s *vm.Share, mode, virtiofsd string, euid int, owner hostUser, trusted bool) (sharePlan, error) {
	if s == nil {
		return sharePlan{}, nil
	}
	root := euid == 0
	switch {
	case s.ReadOnly && mode == ShareVirtiofs:
		return sharePlan{}, fmt.Errorf("%w: a read-only share needs 9p: virtiofsd has no read-only mode", vm.ErrInvalidConfig)
	case mode == ShareVirtiofs && root && !trusted:
		return sharePlan{}, fmt.Errorf("%w: no virtiofs share when Airlock runs as root: virtiofsd would apply the guest's owners, "+
			"modes and device nodes to %s as they are (guest root could leave a setuid-root program there); "+
			"use the 9p share (the default), or run Airlock as the folder's owner", vm.ErrInvalidConfig, s.HostPath)
	case mode == ShareVirtiofs && virtiofsd == "":
		return sharePlan{}, fmt.Errorf("%w: virtiofsd not found in %v (apt install qemu-system-common)", vm.ErrInvalidConfig, virtiofsdPaths)
	case mode == ShareVirtiofs:
		return sharePlan{FS: ShareVirtiofs}, nil
	case !root:
		return sharePlan{FS: Share9P, SecurityModel: modelNone}, nil
	case owner.UID != 0:
		u := owner
		return sharePlan{FS: Share9P, SecurityModel: modelNone, RunAs: &u}, nil
	case s.ReadOnly:
		// Nothing can be written: show the host's owners as they are.
		return sharePlan{FS: Share9P, SecurityModel: modelPassthrough}, nil
	}
	return sharePlan{FS: Share9P, SecurityModel: modelMappedXattr}, nil
}

// readableBy reports whether u may read a file (or list a folder) with
// these owner and mode bits (QEMU reopens it through /proc/self/fd as u,
// which checks the file's own permissions, not its path's).
func readableBy(fi os.FileInfo, u hostUser) bool {
	uid, gid, ok := fileOwner(fi)
	if !ok {
		return true // not ours to judge: QEMU will say
	}
	perm := fi.Mode().Perm()
	switch {
	case uid == u.UID:
		return perm&0o400 != 0
	case gid == u.GID:
		return perm&0o040 != 0
	}
	return perm&0o004 != 0
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
