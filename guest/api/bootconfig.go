package api

import (
	"fmt"
	"strconv"
	"strings"
)

// Transport names how the host reaches the guest agent.
type Transport string

// Transports a backend can offer.
const (
	TransportVsock  Transport = "vsock"  // AF_VSOCK with a virtio-vsock device (vz, vhost-vsock)
	TransportSerial Transport = "serial" // stream multiplexer on the SerialPortName virtio-serial port
	TransportHVSock Transport = "hvsock" // AF_VSOCK over Hyper-V sockets (HCS)
)

// ShareFS names how the workspace is shared into the guest.
type ShareFS string

// Share mechanisms a backend can offer.
const (
	ShareNone     ShareFS = ""
	ShareVirtiofs ShareFS = "virtiofs" // virtio-fs tagged WorkspaceTag
	Share9P       ShareFS = "9p"       // 9p over virtio, tagged WorkspaceTag
	Share9PVsock  ShareFS = "9p-vsock" // 9p with trans=fd over a vsock port (HCS Plan9)
)

// KernelArgs are the words every backend puts on the guest kernel's command
// line after its console: a quiet boot, a panic ends the VM at once, and no
// self-tests of the kernel's crypto algorithms at boot (`cryptomgr.notests`):
// Debian's kernel tests each built-in algorithm before init runs, and every
// module's as it loads, a large part of an emulated guest's boot
// (docs/performance.md, Figures behind the code). The guest kernel's crypto
// API serves no data of the user's (TLS is the programs' own, there is no
// disk encryption); module signatures are still checked.
//
// The kernel is locked down (`lockdown=confidentiality`, Debian's lockdown
// LSM): guest root cannot read or change the kernel's memory (/dev/mem,
// /proc/kcore, kprobes, BPF reads of kernel memory, perf of the kernel,
// tracefs, unsigned modules). It is also faster: without tracefs the
// kernel makes no file per trace event at boot and per module as it
// loads. A kernel without the LSM (airlock-image -kernel source) hands
// the word to init as an environment variable, which init ignores.
//
// One self-test ignores cryptomgr.notests: Debian's built-in SP800-108 KDF
// tests itself at boot (crypto_kdf108_init does nothing else). Its
// hmac(sha256) asks for a module, and asking for a module waits until the
// kernel has unpacked the whole initramfs, so every initcall after it would
// wait too, where the unpack otherwise runs beside them, which delays an
// emulated guest's ready (docs/performance.md, Figures behind the code).
// `initcall_blacklist` skips it; the KDF itself stays (nothing in the guest
// uses it). A kernel without it (airlock-image -kernel source) ignores the
// word.
var KernelArgs = []string{"quiet", "panic=-1", "cryptomgr.notests=1", "initcall_blacklist=crypto_kdf108_init", "lockdown=confidentiality"}

// InitRunning is the console line init writes once it runs and the
// console exists (after its modules load: on Apple's framework the
// console is a module). A host that has not seen it long after the start
// knows the kernel hung before init, which under TCG on a loaded host
// happens now and then with nothing on the quiet console, and can boot
// once more instead of waiting out its boot timeout.
const InitRunning = "airlock-guest: init running"

// Woken is the console line init of a parked guest (BootConfig.Park)
// writes once the host's Wake came. A machine started from a state saved
// while its guest was parked never prints InitRunning (its boot printed it
// to the console of the machine that was saved), so to the host Woken
// says the same: the kernel runs init.
const Woken = "airlock-guest: woken"

// Kernel command line keys. Values never contain spaces.
const (
	keyTransport = "airlock.transport"
	keyShare     = "airlock.share"
	keyShareRO   = "airlock.share_ro"
	keySharePort = "airlock.share_port"
	keyUID       = "airlock.uid"
	keyGID       = "airlock.gid"
	keyDebug     = "airlock.debug"
	keyRoot      = "airlock.root"
	keyRootKeep  = "airlock.root_keep"
	keyPark      = "airlock.park"
	keyToolRW    = "airlock.tool_config_rw"
	keyChanges   = "airlock.changes"
)

// BootConfig is what the host tells the guest through the kernel command
// line. Backends fill Transport and Share; the caller fills the rest.
type BootConfig struct {
	Transport     Transport
	Share         ShareFS
	ShareReadOnly bool
	// SharePort is the vsock port of a 9p-vsock share.
	SharePort uint32
	// UID and GID of the unprivileged task user; zero means the defaults.
	UID, GID uint32
	Debug    bool
	// Root is the ext4 label of a read-only root disk to boot from (the
	// standard image's RootLabel), or "" to stay in the initramfs.
	Root string
	// RootKeep puts the writable layer over Root on a persistent disk (the
	// one labelled DataLabel, or a blank one marked BlankDiskMagic, which
	// the guest formats) instead of a tmpfs that starts empty every boot.
	RootKeep bool
	// Park makes the guest wait for the host's Wake (park.go) once the
	// steps every run of the image shares are done, before it mounts the
	// workspace and opens its multiplexer: the state a host may save and
	// start later machines from. Serial transport only, without a root
	// disk.
	Park bool
	// ToolConfigWritable lets tasks change the files in the workspace that
	// the user's tools run on the host (.git/config, .git/hooks, .envrc,
	// .vscode, .idea), which the guest otherwise makes read-only to them.
	ToolConfigWritable bool
	// Changes holds the guest's changes to the workspace in a layer: the
	// share, which the host makes read-only, is the lower layer of an
	// overlay at WorkspaceDir whose upper layer is on the disk labelled
	// LayerLabel (or a blank one marked BlankLayerMagic, which the guest
	// formats). The host reads the layer on PortLayer.
	Changes bool
}

// Args returns the kernel command line arguments for c, in a stable order.
func (c BootConfig) Args() []string {
	var a []string
	if c.Transport != "" {
		a = append(a, keyTransport+"="+string(c.Transport))
	}
	if c.Share != ShareNone {
		a = append(a, keyShare+"="+string(c.Share))
		if c.ShareReadOnly {
			a = append(a, keyShareRO+"=1")
		}
		if c.SharePort != 0 {
			a = append(a, keySharePort+"="+strconv.FormatUint(uint64(c.SharePort), 10))
		}
	}
	// Written without a share too: the backend, not the caller, says
	// how the share is made (vm/qemu's own words for it).
	if c.ToolConfigWritable {
		a = append(a, keyToolRW+"=1")
	}
	if c.Changes {
		a = append(a, keyChanges+"=1")
	}
	if c.UID != 0 {
		a = append(a, keyUID+"="+strconv.FormatUint(uint64(c.UID), 10))
	}
	if c.GID != 0 {
		a = append(a, keyGID+"="+strconv.FormatUint(uint64(c.GID), 10))
	}
	if c.Debug {
		a = append(a, keyDebug+"=1")
	}
	if c.Root != "" {
		a = append(a, keyRoot+"="+c.Root)
		if c.RootKeep {
			a = append(a, keyRootKeep+"=1")
		}
	}
	if c.Park {
		a = append(a, keyPark+"=1")
	}
	return a
}

// ParseCmdline reads a BootConfig from a kernel command line
// (/proc/cmdline). Unknown words are ignored; a malformed airlock.* value is
// an error. Missing UID/GID become DefaultUID/DefaultGID.
func ParseCmdline(cmdline string) (BootConfig, error) {
	c := BootConfig{UID: DefaultUID, GID: DefaultGID}
	for _, w := range strings.Fields(cmdline) {
		k, v, ok := strings.Cut(w, "=")
		if !ok || !strings.HasPrefix(k, "airlock.") {
			continue
		}
		var err error
		switch k {
		case keyTransport:
			switch t := Transport(v); t {
			case TransportVsock, TransportSerial, TransportHVSock:
				c.Transport = t
			default:
				err = fmt.Errorf("unknown transport %q", v)
			}
		case keyShare:
			switch s := ShareFS(v); s {
			case ShareVirtiofs, Share9P, Share9PVsock:
				c.Share = s
			default:
				err = fmt.Errorf("unknown share %q", v)
			}
		case keyShareRO:
			c.ShareReadOnly, err = strconv.ParseBool(v)
		case keySharePort:
			c.SharePort, err = parseUint32(v)
		case keyUID:
			c.UID, err = parseUint32(v)
		case keyGID:
			c.GID, err = parseUint32(v)
		case keyDebug:
			c.Debug, err = strconv.ParseBool(v)
		case keyRoot:
			if !ValidLabel(v) {
				err = fmt.Errorf("%q is not a file system label (1 to 16 of a-z, 0-9, -)", v)
			}
			c.Root = v
		case keyRootKeep:
			c.RootKeep, err = strconv.ParseBool(v)
		case keyPark:
			c.Park, err = strconv.ParseBool(v)
		case keyToolRW:
			c.ToolConfigWritable, err = strconv.ParseBool(v)
		case keyChanges:
			c.Changes, err = strconv.ParseBool(v)
		}
		if err != nil {
			return c, fmt.Errorf("kernel command line %s: %w", k, err)
		}
	}
	if c.UID == 0 || c.GID == 0 {
		return c, fmt.Errorf("kernel command line: the task user cannot be root (uid %d, gid %d)", c.UID, c.GID)
	}
	if c.Changes && (c.Share == ShareNone || !c.ShareReadOnly) {
		return c, fmt.Errorf("kernel command line: %s needs a read-only share (%s=1)", keyChanges, keyShareRO)
	}
	if c.Park && (c.Transport != TransportSerial || c.Root != "") {
		return c, fmt.Errorf("kernel command line: %s needs the serial transport and no root disk", keyPark)
	}
	return c, nil
}

func parseUint32(s string) (uint32, error) {
	n, err := strconv.ParseUint(s, 10, 32)
	return uint32(n), err
}

// ValidLabel reports whether s can be a root disk label: 1 to 16 bytes
// (ext4's limit) of lower-case letters, digits and '-'.
func ValidLabel(s string) bool {
	if len(s) == 0 || len(s) > 16 {
		return false
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-' {
			return false
		}
	}
	return true
}
