package builder

import (
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"

	"github.com/airlock-sandbox/airlock/guest/api"
)

// initrdFile is the initramfs's artifact name. It is left uncompressed:
// the kernel unpacks it faster than it decompresses it, and every backend
// loads it as is.
const initrdFile = "initramfs.cpio"

// loadListPath is the module load list inside the guest: one absolute
// module path a line, dependencies first, loaded in order with
// finit_module by the guest's init.
const loadListPath = "lib/modules/airlock.load"

// baseEntries are the initramfs members that come from no package: the
// folder skeleton and the few /etc files busybox and Go's os/user read.
func baseEntries() []cpioEntry {
	uid, gid := uint32(api.DefaultUID), uint32(api.DefaultGID)
	home := strings.TrimPrefix(api.UserHome, "/")
	e := []cpioEntry{
		dirEntry("bin", 0o755),
		dirEntry("sbin", 0o755),
		dirEntry("usr", 0o755),
		dirEntry("usr/bin", 0o755),
		dirEntry("usr/sbin", 0o755),
		dirEntry("dev", 0o755),
		// The kernel opens /dev/console for init's stdio before /init runs,
		// so the node must exist before devtmpfs is mounted.
		{Name: "dev/console", Mode: modeChar | 0o600, RMajor: 5, RMinor: 1},
		// With a console that is a module (hvc0 on Apple's framework), init
		// starts with fds 0-2 closed and the Go runtime needs /dev/null to
		// fill them before devtmpfs is mounted.
		{Name: "dev/null", Mode: modeChar | 0o666, RMajor: 1, RMinor: 3},
		dirEntry("proc", 0o555),
		dirEntry("sys", 0o555),
		dirEntry("tmp", 0o1777),
		dirEntry("run", 0o755),
		dirEntry("etc", 0o755),
		dirEntry("root", 0o700),
		dirEntry(strings.TrimPrefix(api.WorkspaceDir, "/"), 0o755),
		dirEntry(path.Dir(home), 0o755),
		{Name: home, Mode: modeDir | 0o755, UID: uid, GID: gid},
		dirEntry("lib", 0o755),
		dirEntry("lib/modules", 0o755),
		fileEntry("etc/passwd", 0o644, fmt.Appendf(nil,
			"root:x:0:0:root:/root:/bin/sh\n%s:x:%d:%d:%s:%s:/bin/sh\n", api.UserName, uid, gid, api.UserName, api.UserHome)),
		fileEntry("etc/group", 0o644, fmt.Appendf(nil, "root:x:0:\n%s:x:%d:\n", api.UserName, gid)),
		fileEntry("etc/hostname", 0o644, []byte("airlock\n")),
		fileEntry("etc/hosts", 0o644, []byte("127.0.0.1 localhost airlock\n")),
		fileEntry("etc/nsswitch.conf", 0o644, []byte("passwd: files\ngroup: files\nhosts: files\n")),
	}
	return e
}

// moduleEntries returns the initramfs members for the modules in order
// (files under /lib/modules/<kver>/ plus the load list), decompressing
// .ko.xz / .ko.gz / .ko.zst files into tmp so the guest needs no
// decompressor.
func moduleEntries(ctx context.Context, modDir, kver, tmp string, idx *moduleIndex, order []string) ([]cpioEntry, error) {
	var entries []cpioEntry
	var list strings.Builder
	for _, name := range order {
		rel := idx.path[name]
		src := filepath.Join(modDir, filepath.FromSlash(rel))
		base, ext := splitModuleExt(rel)
		if ext != ".ko" {
			plain := filepath.Join(tmp, "modules", name+".ko")
			if err := decompressModule(ctx, src, ext, plain); err != nil {
				return nil, fmt.Errorf("images: module %s: %w", name, err)
			}
			src = plain
		}
		guestPath := path.Join("lib/modules", kver, base+".ko")
		entries = append(entries, cpioEntry{Name: guestPath, Mode: modeFile | 0o644, Source: src})
		list.WriteString("/" + guestPath + "\n")
	}
	entries = append(entries, fileEntry(loadListPath, 0o644, []byte(list.String())))
	return entries, nil
}

// splitModuleExt splits "kernel/fs/ext4/ext4.ko.xz" into
// "kernel/fs/ext4/ext4" and ".ko.xz".
func splitModuleExt(rel string) (base, ext string) {
	i := strings.LastIndex(rel, ".ko")
	if i < 0 {
		return rel, ""
	}
	return rel[:i], rel[i:]
}

func decompressModule(ctx context.Context, src, ext, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer out.Close()
	switch ext {
	case ".ko.gz":
		zr, err := gzip.NewReader(in)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, zr); err != nil {
			return err
		}
	case ".ko.xz", ".ko.zst":
		tool := map[string]string{".ko.xz": "xz", ".ko.zst": "zstd"}[ext]
		cmd := exec.CommandContext(ctx, tool, "-dc")
		cmd.Stdin, cmd.Stdout = in, out
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s -dc %s: %w: %s", tool, src, err, strings.TrimSpace(stderr.String()))
		}
	default:
		return fmt.Errorf("unknown module compression %q", ext)
	}
	return out.Close()
}
