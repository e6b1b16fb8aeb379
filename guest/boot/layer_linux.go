package boot

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/guest/api"
)

// The changes layer (api.BootConfig.Changes): the share, read-only, is the
// lower layer of an overlay at api.WorkspaceDir; its upper layer lives on
// the layer disk, so what tasks change stays in the guest, on a disk of
// the host's (not in guest memory), until the host takes it
// (guest/agent's layer calls).
const (
	// airlockRunDir holds LowerDir and LayerDir. Root's alone: tasks see
	// the share only through the overlay, and never the upper folder
	// beneath it.
	airlockRunDir = "/run/airlock"
	// layerInodeRatio is the layer file system's bytes per inode: 32 KiB,
	// half as many inodes as mke2fs's default, a quarter of the inode
	// tables it zeroes when it formats (see formatLayer).
	layerInodeRatio = 32 << 10
)

// overlayOptions are the overlay's options beyond its folders, each
// chosen for a layer the host reads as a tar and applies to a folder the
// overlay never saw change:
//   - redirect_dir=off: renaming a folder of the share fails with EXDEV,
//     and tools (mv, rename in most libraries) then copy it: the upper
//     layer holds the new folder whole and a whiteout for the old name,
//     never a redirect xattr pointing into the share that the host would
//     have to follow.
//   - index=off: no index of lower inodes by file handle. With it the
//     overlay records the share's file handles and refuses a share that
//     changed between VMs (the host's folder does: the user edits it,
//     applies change), and 9p gives no stable handles anyway.
//   - metacopy=off: a change of mode or owner copies the whole file up, so
//     every upper file holds its own bytes and the export never needs the
//     share's.
//   - xino=on: every file in /workspace has the overlay's st_dev, as its
//     folders do. Without it a file reports the device of the layer it is
//     on (the layer disk's ext4 for a changed file, an anonymous one for
//     the share's), and the agent, which tells what is in the workspace
//     by its device (guest/agent symlink.go: setuid and setgid bits are
//     refused there), took a changed file for one outside it. A file
//     whose inode number does not fit beside the layer bits falls back to
//     its layer's device (the kernel warns once).
//
// The kernel's own defaults for these may differ (its config or module
// parameters); they are given explicitly.
const overlayOptions = "redirect_dir=off,index=off,metacopy=off,xino=on"

// layerWait bounds the wait for the layer disk: the disk is there at boot,
// its driver probes as it loads.
const layerWait = diskWait

// mountChanges mounts the share read-only at api.LowerDir, the layer disk
// (formatted first when blank) at api.LayerDir, and the overlay of the two
// at api.WorkspaceDir.
func mountChanges(log *slog.Logger, cfg api.BootConfig) error {
	if err := os.MkdirAll(airlockRunDir, 0o700); err != nil {
		return fmt.Errorf("changes layer: %w", err)
	}
	if err := os.Chmod(airlockRunDir, 0o700); err != nil {
		return fmt.Errorf("changes layer: %w", err)
	}
	// The host makes the share read-only; the guest mounts it so too, so a
	// write fails at once with EROFS rather than at the host.
	if err := mountShare(log, cfg, func(m *mount) { m.target, m.flags = api.LowerDir, m.flags|unix.MS_RDONLY }); err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	log.Debug("changes layer: share mounted beneath")
	dev, err := findDisk(func(k diskKind, label string) bool {
		return k == diskBlankLayer || (k == diskExt && label == api.LayerLabel)
	}, layerWait)
	if err != nil {
		return fmt.Errorf("changes layer disk: %w", err)
	}
	log.Debug("changes layer: disk found", "dev", dev)
	if kind, _ := probeDevice(dev); kind == diskBlankLayer {
		began := time.Now()
		if err := formatLayer(dev); err != nil {
			return fmt.Errorf("changes layer disk: format %s: %w", dev, err)
		}
		log.Info("formatted the changes layer disk", "dev", dev, "took", time.Since(began).Round(time.Millisecond).String())
	}
	// ext4 mounts the ext2 layout busybox writes (and keeps it ext2-shaped:
	// no journal), with user and trusted xattrs, which the overlay needs.
	// discard: the blocks of what is deleted or forgotten go back to the
	// host (its layer file is sparse; QEMU's discard=unmap punches them).
	if err := (mount{dev, api.LayerDir, "ext4", nodevSuid, "discard", 0o700}).do(); err != nil {
		return fmt.Errorf("changes layer disk: %w", err)
	}
	log.Debug("changes layer: disk mounted")
	if err := prepareUpper(api.LowerDir); err != nil {
		return fmt.Errorf("changes layer: %w", err)
	}
	opts := "lowerdir=" + api.LowerDir + ",upperdir=" + api.LayerUpper + ",workdir=" + api.LayerWork + "," + overlayOptions
	if err := (mount{"overlay", api.WorkspaceDir, "overlay", nodevSuid, opts, workspaceMode}).do(); err != nil {
		return fmt.Errorf("changes layer: overlay: %w", err)
	}
	return nil
}

// prepareUpper makes the upper and work folders, and gives the upper
// folder the owner and mode of the share's root: the overlay's root takes
// them from the upper folder, and the task user must find /workspace as
// the host's folder is (its own, on a Linux host's 9p share). The root's
// own mode and owner are not part of the layer: they are reset every boot.
func prepareUpper(lower string) error {
	for _, d := range []string{api.LayerUpper, api.LayerWork} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	var st unix.Stat_t
	if err := unix.Stat(lower, &st); err != nil {
		return err
	}
	if err := os.Lchown(api.LayerUpper, int(st.Uid), int(st.Gid)); err != nil {
		return err
	}
	return os.Chmod(api.LayerUpper, os.FileMode(st.Mode&0o7777&^(unix.S_ISUID|unix.S_ISGID)))
}

// formatLayer makes an ext file system labelled api.LayerLabel on a blank
// layer disk with the initramfs's busybox mke2fs (the ext2 layout; the
// kernel's ext4 driver mounts it). -m 0: no blocks kept for root, so the
// disk's size is the bound tasks and the overlay's copy-ups (made as root)
// share alike. -I 256: the overlay's xattrs (opaque folders) fit in the
// inode, not a block of their own each. -i: busybox writes every inode
// table out in full (no lazy init): 8 GiB with its default of one inode
// per 16 KiB is 128 MiB of zeroes to write; see layerInodeRatio.
//
// A guest on a root disk (the standard image) runs in that root by now,
// which has e2fsprogs' mke2fs, taking the same options, where busybox may
// be missing.
func formatLayer(dev string) error {
	args := []string{"-F", "-b", "4096", "-m", "0", "-I", "256", "-i", strconv.Itoa(layerInodeRatio), "-L", api.LayerLabel, dev}
	cmd := exec.Command("/bin/busybox", append([]string{"mke2fs"}, args...)...)
	if _, err := os.Stat(cmd.Path); err != nil {
		cmd = exec.Command("/sbin/mke2fs", append([]string{"-q"}, args...)...)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
	}
	return clearMagic(dev, len(api.BlankLayerMagic))
}

// clearMagic zeroes the blank disk's mark once the file system is made:
// busybox mke2fs leaves the disk's first 1024 bytes (which ext does not
// use) as they were, and a mark left there would have the next boot
// format the layer again. A format cut off before this leaves the mark,
// and the next boot formats it again.
func clearMagic(dev string, n int) error {
	f, err := os.OpenFile(dev, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(make([]byte, n), 0); err != nil {
		f.Close()
		return fmt.Errorf("clear the blank mark: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("clear the blank mark: %w", err)
	}
	return f.Close()
}

// unmountChanges unmounts what mountChanges mounted, beneath the overlay
// (already unmounted by unmountWorkspace): the layer disk, cleanly (its
// file system has no journal), and the share.
func unmountChanges() error {
	var errs []error
	for _, d := range []string{api.LayerDir, api.LowerDir} {
		err := unix.Unmount(d, 0)
		if errors.Is(err, unix.EBUSY) {
			err = unix.Unmount(d, unix.MNT_DETACH)
		}
		if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", filepath.Base(d), err))
		}
	}
	return errors.Join(errs...)
}
