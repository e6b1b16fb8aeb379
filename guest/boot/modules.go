package boot

import (
	"bufio"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/airlock-sandbox/airlock/guest/api"
)

// ModulesList is the image's module load list: one absolute .ko path a
// line, dependencies first.
const ModulesList = "/lib/modules/airlock.load"

const maxModules = 1024

// ParseModules reads a module load list. Blank lines and lines starting
// with '#' are skipped; every other line must be an absolute, clean path.
// Bad lines are returned as problems, not errors: one bad entry must not
// keep the others from loading.
func ParseModules(r io.Reader) (paths, problems []string, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), 4096)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if !path.IsAbs(line) || path.Clean(line) != line || strings.ContainsAny(line, " \t\x00") {
			problems = append(problems, fmt.Sprintf("line %d: %q is not an absolute module path", n, line))
			continue
		}
		if len(paths) == maxModules {
			return paths, problems, fmt.Errorf("module list longer than %d entries", maxModules)
		}
		paths = append(paths, line)
	}
	if err := sc.Err(); err != nil {
		return paths, problems, fmt.Errorf("module list: %w", err)
	}
	return paths, problems, nil
}

// compressed reports whether a module file needs the kernel to decompress
// it (finit_module MODULE_INIT_COMPRESSED_FILE, Linux 6.4+).
func compressed(p string) bool {
	for _, ext := range []string{".ko.xz", ".ko.zst", ".ko.gz"} {
		if strings.HasSuffix(p, ext) {
			return true
		}
	}
	return false
}

// modulePart is a set of the guest's optional parts a module serves.
type modulePart uint8

const (
	partVirtiofs    modulePart = 1 << iota // the workspace over virtio-fs
	part9PVirtio                           // the workspace over 9p, virtio transport
	part9PFD                               // the workspace over 9p, fd transport (HCS Plan9)
	partVsock                              // AF_VSOCK itself
	partVirtioVsock                        // virtio-vsock (QEMU with vhost, vz)
	partHyperV                             // VMBus: Hyper-V sockets, Hyper-V disks
	partRootDisk                           // a root disk (virtio-blk or SCSI, ext4, overlay)
)

// moduleParts names the modules of the image (as ModuleName gives them)
// that only some boots need. Loading a module costs boot time (most for
// the file systems under emulation), so a boot loads only
// the ones its transport and share use. Modules not listed load unless
// the VM lacks their device (devices.Absent): the virtio core and
// transports, the console, entropy, the balloon.
var moduleParts = map[string]modulePart{
	"fuse": partVirtiofs, "virtiofs": partVirtiofs,
	"netfs": part9PVirtio | part9PFD, "fscache": part9PVirtio | part9PFD,
	"9pnet": part9PVirtio | part9PFD, "9p": part9PVirtio | part9PFD,
	"9pnet_virtio": part9PVirtio, "9pnet_fd": part9PFD,
	"vsock": partVsock, "vmw_vsock_virtio_transport_common": partVirtioVsock, "vmw_vsock_virtio_transport": partVirtioVsock,
	"hv_vmbus": partHyperV | partRootDisk, "hv_sock": partHyperV,
	"virtio_blk": partRootDisk, "crc16": partRootDisk, "mbcache": partRootDisk,
	"jbd2": partRootDisk, "ext4": partRootDisk, "crc32c_generic": partRootDisk, "overlay": partRootDisk,
	// A root disk on Hyper-V is a SCSI disk.
	"hv_storvsc": partRootDisk, "sd_mod": partRootDisk, "scsi_common": partRootDisk, "scsi_mod": partRootDisk,
	"scsi_transport_fc": partRootDisk, "crc64": partRootDisk, "crc64_rocksoft": partRootDisk,
	"crct10dif_common": partRootDisk, "crc_t10dif": partRootDisk, "t10_pi": partRootDisk,
}

// neededParts is what a boot with cfg uses.
func neededParts(cfg api.BootConfig) modulePart {
	var p modulePart
	switch cfg.Transport {
	case api.TransportVsock, "":
		p |= partVsock | partVirtioVsock
	case api.TransportHVSock:
		p |= partVsock | partHyperV
	}
	if cfg.Root != "" || cfg.Changes {
		p |= partRootDisk
	}
	switch cfg.Share {
	case api.ShareVirtiofs:
		p |= partVirtiofs
	case api.Share9P:
		p |= part9PVirtio
	case api.Share9PVsock:
		p |= part9PFD
	}
	return p
}

// ModuleName is a module file's name as the kernel knows it: the base
// name without ".ko" and compression suffix, '-' folded to '_'.
func ModuleName(p string) string {
	base := path.Base(p)
	if i := strings.Index(base, ".ko"); i >= 0 {
		base = base[:i]
	}
	return strings.ReplaceAll(base, "-", "_")
}

// ModuleNeeded reports whether a boot with cfg loads the module file p:
// a module serving parts loads when the boot uses one of them (a module
// serving two parts needs both to be skipped, and a dependency is listed
// with every part it serves); any other module always loads.
func ModuleNeeded(p string, cfg api.BootConfig) bool {
	parts, ok := moduleParts[ModuleName(p)]
	return !ok || parts&neededParts(cfg) != 0
}

// lateModules are the modules a parked guest (api.BootConfig.Park) loads
// only after the host's Wake: virtio_blk, whose probe reads the head of
// every disk (the partition scan) into the kernel's cache. A template's
// memory is saved at the park, so anything read before it would be the
// disk of the machine that saved it, stale or another workspace's
// changes layer, in every machine started from the template.
var lateModules = map[string]bool{"virtio_blk": true}

// SplitLate returns the modules of paths to load before a park and those
// to load after the wake: all before unless cfg parks with a layer disk.
func SplitLate(paths []string, cfg api.BootConfig) (now, late []string) {
	if !cfg.Park || !cfg.Changes {
		return paths, nil
	}
	for _, p := range paths {
		if lateModules[ModuleName(p)] {
			late = append(late, p)
		} else {
			now = append(now, p)
		}
	}
	return now, late
}
