package builder

import (
	"context"
	"fmt"
	"path"
	"strings"
)

// busyboxFile is busybox's place in the initramfs; every applet link
// points there.
const busyboxFile = "bin/busybox"

// appletDirs are the folders busybox installs applets in ("" is the root,
// where Debian's build puts linuxrc).
var appletDirs = map[string]bool{"": true, "bin/": true, "sbin/": true, "usr/bin/": true, "usr/sbin/": true}

// withoutApplets are applets that get no link. The kernel runs
// /sbin/modprobe (its compiled-in helper path) for every module it wants
// but does not have: six times while it boots (its crypto self-test and
// key types ask for "crypto-hmac(sha256)", "crypto-cbc(aes)", ...), each a
// busybox process under emulation that cannot help, since the initramfs
// has no modules.dep (init loads the modules it needs itself). Without the
// file the kernel's request fails at once.
var withoutApplets = map[string]bool{"sbin/modprobe": true}

// busyboxLinks returns the symbolic links `busybox --install -s` makes at
// boot, for the initramfs: one per applet, in the folder busybox's own table
// gives it, from the binary's `--list-full`. The binary is the guest's, so
// for another architecture this host runs it through binfmt_misc's emulator
// (as the standard image's debootstrap does); an error means it could not.
func busyboxLinks(ctx context.Context, bin string) ([]cpioEntry, error) {
	out, err := run(ctx, "", nil, bin, "--list-full")
	if err != nil {
		return nil, fmt.Errorf("images: list busybox's applets: %w", err)
	}
	return appletLinks(string(out))
}

// appletLinks parses `busybox --list-full` ("usr/bin/env", one a line).
func appletLinks(list string) ([]cpioEntry, error) {
	var links []cpioEntry
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
		dir, name := path.Split(strings.TrimSpace(line))
		if !appletDirs[dir] || name == "" || name == "." || name == ".." || strings.ContainsFunc(name, func(r rune) bool { return r <= ' ' || r > '~' }) {
			return nil, fmt.Errorf("images: busybox --list-full: unexpected line %q", line)
		}
		if seen[dir+name] {
			return nil, fmt.Errorf("images: busybox --list-full: %s twice", dir+name)
		}
		seen[dir+name] = true
		if withoutApplets[dir+name] {
			continue
		}
		links = append(links, linkEntry(dir+name, "/"+busyboxFile))
	}
	// The agent runs tasks with /bin/sh, and tasks expect the basics.
	for _, need := range []string{"bin/sh", "bin/ls", "usr/bin/env"} {
		if !seen[need] {
			return nil, fmt.Errorf("images: busybox --list-full lists no %s (%d applets)", need, len(links))
		}
	}
	return links, nil
}

// withoutNames returns the links whose names no entry has (busybox
// --install leaves an existing file alone too).
func withoutNames(links, entries []cpioEntry) []cpioEntry {
	have := make(map[string]bool, len(entries))
	for _, e := range entries {
		have[path.Clean(strings.TrimPrefix(e.Name, "/"))] = true
	}
	var out []cpioEntry
	for _, l := range links {
		if !have[l.Name] {
			out = append(out, l)
		}
	}
	return out
}
