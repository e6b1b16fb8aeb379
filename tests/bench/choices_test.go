//go:build e2e

package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/app/workspace"
	"github.com/airlock-sandbox/airlock/images/manifest"
	"github.com/airlock-sandbox/airlock/vm/qemu"
)

// bootChoice is one way to boot the floor guest: a kernel form, an
// initramfs encoding and a machine type.
type bootChoice struct {
	key, name      string
	kernel, initrd string
	machine        string // qemu.Options.Machine: "" for the default
}

// choices boots the floor guest (kernel and initramfs of the image with
// Debian's kernel, a trivial init) in each image choice issue 9 asks
// about, alternating rounds, against that image's form: an uncompressed
// PVH vmlinux, an uncompressed initramfs, the default machine. Only with -only choices: it costs about
// 20 boots.
func (h *harness) choices() {
	ctx := context.Background()
	floorBin := filepath.Join(h.work, "floorinit")
	if err := buildGuest("./testdata/floorinit", floorBin); err != nil {
		h.b.Fatal(err)
	}
	dir := filepath.Join(h.work, "choices")
	os.MkdirAll(dir, 0o755)
	plain := filepath.Join(dir, "floor.cpio")
	if err := floorInitramfs(filepath.Join(h.debianDir, "initramfs.cpio"), floorBin, plain); err != nil {
		h.b.Fatal(err)
	}
	vmlinux := filepath.Join(h.debianDir, "vmlinux")
	// Every choice runs with the accelerator a first, uncounted default
	// boot settles on, so that no counted boot includes the KVM probe. The
	// accelerator also decides the default machine (microvm under TCG on a
	// host whose TSC rate the backend measured, else q35), which the other
	// is set against.
	accel, machine := "", ""
	warm := h.machineConfig("choice-warmup", plain, "", 0, 0)
	warm.Kernel, warm.Share = vmlinux, nil // same kernel: KernelHZ stays
	bt, err := boot(ctx, warm, qemu.Options{})
	if err != nil {
		h.logf("skip the boot choices: %v", err)
		return
	}
	accel, machine = bt.m.Info().Accelerator, bt.m.Info().Machine
	bt.m.Stop(ctx)
	def := bootChoice{"default", "vmlinux (PVH), plain cpio, " + machine, vmlinux, plain, ""}
	var alts []bootChoice
	for _, c := range []struct{ tool, ext string }{{"gzip", "gz"}, {"lz4", "lz4"}, {"zstd", "zst"}, {"xz", "xz"}} {
		out := plain + "." + c.ext
		args := []string{"-c", plain}
		switch c.tool {
		case "lz4":
			args = []string{"-l", "-c", plain} // the legacy format the kernel reads
		case "xz":
			args = []string{"--check=crc32", "-c", plain}
		}
		if err := shellOut(out, c.tool, args...); err != nil {
			h.logf("skip %s initramfs: %v", c.tool, err)
			continue
		}
		alts = append(alts, bootChoice{"initramfs-" + c.tool, "initramfs " + c.tool, vmlinux, out, ""})
	}
	if bz, err := bzImage(h.debianDir, dir); err != nil {
		h.logf("skip bzImage: %v", err)
	} else {
		alts = append(alts, bootChoice{"kernel-bzimage", "kernel bzImage (via firmware)", bz, plain, ""})
	}
	// The other x86 machine, with the same devices on its bus. microvm
	// needs the host's TSC rate under TCG; without it the backend refuses
	// it, and the choice is skipped when its boots fail.
	switch machine {
	case qemu.MachineMicrovm:
		alts = append(alts, bootChoice{"machine-q35", "machine q35 (PCI)", vmlinux, plain, qemu.MachineQ35})
	case qemu.MachineQ35:
		alts = append(alts, bootChoice{"machine-microvm", "machine microvm (virtio-mmio)", vmlinux, plain, qemu.MachineMicrovm})
	}
	// The kernel built from linux-source (make image builds it on amd64),
	// when the product boots it: its own initramfs (no modules) with the
	// floor init.
	src := ""
	if h.imageDir != h.debianDir {
		src = h.imageDir
	}
	if src != "" {
		srcFloor := filepath.Join(dir, "floor-kernel-source.cpio")
		if err := floorInitramfs(filepath.Join(src, "initramfs.cpio"), floorBin, srcFloor); err != nil {
			h.b.Fatal(err)
		}
		alts = append(alts, bootChoice{"kernel-source", "kernel from linux-source, drivers built in", filepath.Join(src, "vmlinux"), srcFloor, ""})
	} else {
		h.logf("skip the linux-source kernel: no image in %s (make image)", filepath.Join(h.debianDir, "..", manifest.KernelSourceDir))
	}

	samples := map[string][]float64{}
	bootOne := func(c bootChoice, i int, key string) {
		cfg := h.machineConfig(fmt.Sprintf("choice-%s-%d", c.key, i), c.initrd, "", 0, 0)
		cfg.Kernel, cfg.Share, cfg.KernelHZ = c.kernel, nil, kernelHZ(c.kernel, h.debianDir)
		bt, err := boot(ctx, cfg, qemu.Options{Machine: c.machine, Accel: accel})
		if err != nil {
			h.logf("boot %s: %v", c.key, err)
			return
		}
		bt.m.Stop(ctx)
		samples[key] = append(samples[key], ms(bt.elapsed))
		h.logf("choice %s round %d: %v (guest %d ms)", c.key, i, bt.elapsed.Round(time.Millisecond), bt.ready.BootMillis)
	}
	for i := range h.rounds {
		for _, c := range alts {
			// Each choice against the default booted just before it: the
			// machine's load drifts more than the choices differ.
			bootOne(def, i, "default-"+c.key)
			bootOne(c, i, c.key)
		}
	}
	for _, c := range alts {
		if len(samples[c.key]) == 0 {
			continue
		}
		h.t.add("choice-"+c.key, "boot choice: "+c.name, "ms", samples[c.key], "default, booted alternately", samples["default-"+c.key], nil)
	}
	if src != "" {
		h.sourceKernelAgent(src)
	}
}

// sourceKernelAgent boots the full agent image (9p workspace, as the boot
// phase does) with each kernel, alternating: the Debian kernel loading its
// modules, and the kernel from linux-source with everything built in.
func (h *harness) sourceKernelAgent(src string) {
	ctx := context.Background()
	ws := filepath.Join(h.work, "choices-ws")
	os.Mkdir(ws, 0o755)
	ws = ownedByTaskUser(ws)
	uid, gid := workspace.Owner(ws)
	type img struct{ key, kernel, initrd string }
	imgs := []img{
		{"debian", filepath.Join(h.debianDir, "vmlinux"), filepath.Join(h.debianDir, "initramfs.cpio")},
		{"source", filepath.Join(src, "vmlinux"), filepath.Join(src, "initramfs.cpio")},
	}
	readyMS, uptime := map[string][]float64{}, map[string][]float64{}
	for i := range h.rounds {
		for _, im := range imgs {
			cfg := h.machineConfig(fmt.Sprintf("agent-%s-%d", im.key, i), im.initrd, ws, uid, gid)
			cfg.Kernel, cfg.KernelHZ = im.kernel, kernelHZ(im.kernel, h.debianDir)
			bt, err := boot(ctx, cfg, qemu.Options{})
			if err != nil {
				h.logf("boot the agent image, %s kernel: %v", im.key, err)
				continue
			}
			bt.m.Stop(ctx)
			readyMS[im.key] = append(readyMS[im.key], ms(bt.elapsed))
			uptime[im.key] = append(uptime[im.key], float64(bt.ready.BootMillis))
			h.logf("agent image, %s kernel, round %d: %v (guest %d ms)", im.key, i, bt.elapsed.Round(time.Millisecond), bt.ready.BootMillis)
		}
	}
	if len(readyMS["source"]) == 0 || len(readyMS["debian"]) == 0 {
		return
	}
	h.t.add("choice-kernel-source-agent", "boot to ready: agent image, kernel from linux-source", "ms", readyMS["source"], "Debian kernel + modules, alternately", readyMS["debian"], nil)
	h.t.add("choice-kernel-source-agent-uptime", "  guest uptime at ready: agent, kernel from linux-source", "ms", uptime["source"], "Debian kernel + modules, alternately", uptime["debian"], nil)
}

func shellOut(dst, tool string, args ...string) error {
	if _, err := exec.LookPath(tool); err != nil {
		return err
	}
	f, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer f.Close()
	var stderr strings.Builder
	cmd := exec.Command(tool, args...)
	cmd.Stdout, cmd.Stderr = f, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%v: %s", err, stderr.String())
	}
	return nil
}

// bzImage extracts the compressed kernel the image's vmlinux came from,
// from the package in the image builder's cache.
func bzImage(imageDir, dir string) (string, error) {
	debs, _ := filepath.Glob(filepath.Join(imageDir, "..", "cache", "linux-image-*_amd64.deb"))
	if len(debs) == 0 {
		return "", fmt.Errorf("no linux-image .deb in the builder's cache")
	}
	x := filepath.Join(dir, "deb")
	if out, err := exec.Command("dpkg-deb", "-x", debs[len(debs)-1], x).CombinedOutput(); err != nil {
		return "", fmt.Errorf("dpkg-deb: %v: %s", err, out)
	}
	bz, _ := filepath.Glob(filepath.Join(x, "boot", "vmlinuz-*"))
	if len(bz) == 0 {
		return "", fmt.Errorf("no vmlinuz in %s", debs[len(debs)-1])
	}
	return bz[0], nil
}
