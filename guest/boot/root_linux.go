package boot

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/guest/api"
)

// Where init assembles the new root inside the initramfs.
const (
	baseDir    = "/mnt/base"  // the read-only root disk
	layerDir   = "/mnt/layer" // the writable layer's file system
	newRootDir = "/sysroot"   // the overlay that becomes /
	// diskWait bounds the wait for the root disk to appear: virtio-blk
	// probes while its module loads, Hyper-V's SCSI disks a little later.
	diskWait = 20 * time.Second
)

// movedMounts are the early mounts carried into the new root (each with
// what is mounted below it: /dev/pts, /sys/fs/cgroup).
var movedMounts = []string{"/dev", "/proc", "/sys", "/run", "/tmp"}

// switchRoot makes a Debian root disk the root: the disk labelled cfg.Root
// read-only at the bottom, a writable layer (tmpfs, or the persistent disk
// with cfg.RootKeep) on top, joined by overlayfs; then the kernel file
// systems move into it and init chroots there. The agent, started later
// from /proc/self/exe, runs from the initramfs's binary in the new root.
func (in *pid1) switchRoot() error {
	base, err := findDisk(func(k diskKind, label string) bool { return k == diskExt && label == in.cfg.Root }, diskWait)
	if err != nil {
		return fmt.Errorf("root disk %q: %w", in.cfg.Root, err)
	}
	if err := (mount{base, baseDir, "ext4", unix.MS_RDONLY | unix.MS_NODEV, "", 0o755}).do(); err != nil {
		return fmt.Errorf("root disk: %w", err)
	}
	if in.cfg.RootKeep {
		if err := in.mountPersistentLayer(); err != nil {
			return err
		}
	} else if err := (mount{"tmpfs", layerDir, "tmpfs", unix.MS_NODEV, "mode=0755", 0o755}).do(); err != nil {
		return fmt.Errorf("writable layer: %w", err)
	}
	upper, work := filepath.Join(layerDir, "upper"), filepath.Join(layerDir, "work")
	for _, d := range []string{upper, work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("writable layer: %w", err)
		}
	}
	opts := "lowerdir=" + baseDir + ",upperdir=" + upper + ",workdir=" + work
	if err := (mount{"overlay", newRootDir, "overlay", unix.MS_NODEV, opts, 0o755}).do(); err != nil {
		return fmt.Errorf("root overlay: %w", err)
	}
	for _, m := range movedMounts {
		target := newRootDir + m
		if err := os.MkdirAll(target, 0o755); err != nil {
			return fmt.Errorf("switch root: %w", err)
		}
		if err := unix.Mount(m, target, "", unix.MS_MOVE, ""); err != nil {
			return fmt.Errorf("switch root: move %s: %w", m, err)
		}
	}
	if err := unix.Chdir(newRootDir); err != nil {
		return fmt.Errorf("switch root: %w", err)
	}
	if err := unix.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("switch root: move to /: %w", err)
	}
	if err := unix.Chroot("."); err != nil {
		return fmt.Errorf("switch root: chroot: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("switch root: %w", err)
	}
	in.log.Debug("root switched", "disk", base, "keep", in.cfg.RootKeep)
	return nil
}

// mountPersistentLayer mounts the persistent disk as the writable layer,
// formatting it first when the host marked it blank.
func (in *pid1) mountPersistentLayer() error {
	dev, err := findDisk(func(k diskKind, label string) bool {
		return k == diskBlank || (k == diskExt && label == api.DataLabel)
	}, diskWait)
	if err != nil {
		return fmt.Errorf("persistent disk: %w", err)
	}
	if kind, _ := probeDevice(dev); kind == diskBlank {
		in.log.Info("formatting the new persistent disk", "dev", dev)
		if err := formatWithBase(dev); err != nil {
			return fmt.Errorf("persistent disk: format %s: %w", dev, err)
		}
	}
	if err := (mount{dev, layerDir, "ext4", unix.MS_NODEV, "", 0o755}).do(); err != nil {
		return fmt.Errorf("persistent disk: %w", err)
	}
	return nil
}

// formatWithBase runs the root disk's own mkfs.ext4 (the initramfs has
// none) in a chroot of the base, with /dev and /proc bound into it.
func formatWithBase(dev string) error {
	var bound []string
	defer func() {
		for i := len(bound) - 1; i >= 0; i-- {
			_ = unix.Unmount(bound[i], unix.MNT_DETACH)
		}
	}()
	for _, d := range []string{"/dev", "/proc"} {
		t := baseDir + d
		if err := unix.Mount(d, t, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s: %w", d, err)
		}
		bound = append(bound, t)
	}
	cmd := exec.Command("/usr/sbin/chroot", baseDir, "/sbin/mkfs.ext4", "-q", "-F", "-L", api.DataLabel, dev)
	if _, err := os.Stat(cmd.Path); err != nil {
		cmd = exec.Command("/bin/busybox", "chroot", baseDir, "/sbin/mkfs.ext4", "-q", "-F", "-L", api.DataLabel, dev)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// findDisk waits up to wait for a block device whose first bytes match,
// and returns its /dev path.
func findDisk(match func(diskKind, string) bool, wait time.Duration) (string, error) {
	deadline := time.Now().Add(wait)
	var seen []string
	for {
		ents, _ := os.ReadDir("/sys/class/block")
		seen = seen[:0]
		for _, e := range ents {
			dev := "/dev/" + e.Name()
			kind, label := probeDevice(dev)
			seen = append(seen, fmt.Sprintf("%s(%s)", e.Name(), label))
			if match(kind, label) {
				return dev, nil
			}
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no such disk after %s (block devices: %s)", wait, strings.Join(seen, " "))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// probeDevice reads the head of a block device and probes it.
func probeDevice(dev string) (diskKind, string) {
	f, err := os.Open(dev)
	if err != nil {
		return diskUnknown, ""
	}
	defer f.Close()
	head := make([]byte, probeSize)
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return diskUnknown, ""
	}
	return probeDisk(head[:n])
}
