//go:build e2e

package security

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/app/sandbox"
	"github.com/airlock-sandbox/airlock/guest/client"
	"github.com/airlock-sandbox/airlock/tests/internal/vmharness"
)

// Who serves the share decides what guest root can leave on the host
// (vm/qemu chooseShare). Run as root, Airlock serves a user's folder as
// that user (QEMU started as the folder's owner) and root's own folder with
// the guest's owners and modes in xattrs. These attacks check both modes
// from the host's side; as a user, the first is what always happens.

// TestShareServedAsOwner: the shared VM's folder belongs to uid 1000, so
// QEMU, which serves it, runs as uid 1000 even when Airlock runs as root,
// and guest root cannot hand files to anyone else on the host.
func TestShareServedAsOwner(t *testing.T) {
	t.Parallel()
	p := probe(t)
	attack(t, wsFamily, "the share's server (QEMU) runs as the folder's owner, not as root", func(a *Attack) {
		uid, err := processUID(shared.Machine().Info().PID)
		if err != nil {
			a.Fatal(err)
		}
		if want := uint32(os.Getuid()); os.Getuid() == 0 {
			want = vmharness.TaskUID
			if uid != want {
				a.breach("QEMU serves uid %d's folder as uid %d", want, uid)
			}
		}
	})
	attack(t, wsFamily, "guest root gives a file to host root (chown, chgrp)", func(a *Attack) {
		r := root(a, "echo x > /workspace/r-own && chown 0:0 /workspace/r-own; chgrp 0 /workspace/r-own; ls -ln /workspace/r-own")
		fi, err := os.Lstat(filepath.Join(sharedWS, "r-own"))
		defer os.Remove(filepath.Join(sharedWS, "r-own"))
		if err != nil {
			a.Fatalf("guest root could not write the share at all: %v (%s)", err, r)
		}
		if st := fi.Sys().(*syscall.Stat_t); os.Getuid() == 0 && (st.Uid != vmharness.TaskUID || st.Gid == 0) {
			a.breach("a file guest root wrote in uid %d's folder belongs to %d:%d on the host (%s)", vmharness.TaskUID, st.Uid, st.Gid, r)
		}
	})
	attack(t, wsFamily, "guest root reads a root-only file inside the user's folder", func(a *Attack) {
		// The owner cannot read it on the host, so neither can the guest.
		f := filepath.Join(sharedWS, "root-only.txt")
		os.WriteFile(f, []byte(secretText+"\n"), 0o600)
		defer os.Remove(f)
		if os.Getuid() != 0 {
			return // only root can plant a file its owner cannot read
		}
		os.Chown(f, 0, 0)
		noSecret(a, root(a, "cat /workspace/root-only.txt; cp /workspace/root-only.txt /tmp/x && cat /tmp/x"))
		r := root(a, "echo pwned >> /workspace/root-only.txt; chmod 666 /workspace/root-only.txt")
		if b, _ := os.ReadFile(f); string(b) != secretText+"\n" {
			a.breach("guest root wrote a root-only file in the user's folder: %q (%s)", b, r)
		}
	})
	attack(t, wsFamily, "guest root makes a setuid program of the folder's owner run as someone else", func(a *Attack) {
		// A setuid file of the folder's owner is a breach too: anyone who
		// runs it on the host, another user or a service, runs as the
		// owner the program the guest wrote.
		r := root(a, "cp "+p+" /workspace/r-suid2 && chmod 6755 /workspace/r-suid2")
		bin := filepath.Join(sharedWS, "r-suid2")
		defer os.Remove(bin)
		fi, err := os.Lstat(bin)
		if err != nil || fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid) == 0 {
			return
		}
		out := ""
		if os.Getuid() == 0 {
			out, _ = asUser(1001, bin, "euid")
		}
		a.breach("the guest left a setuid file (mode %v) of uid %d in the user's folder; run by host uid 1001: %q (%s)",
			fi.Mode(), fi.Sys().(*syscall.Stat_t).Uid, strings.TrimSpace(out), r)
	})
}

// processUID is the real uid a host process runs as.
func processUID(pid int) (uint32, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" {
			n, err := strconv.Atoi(f[1])
			return uint32(n), err
		}
	}
	return 0, fmt.Errorf("no Uid in /proc/%d/status", pid)
}

// rootFolder boots a VM on a folder owned by root (Airlock run as root on
// root's own folder): the share is 9p with mapped-xattr, so whatever guest
// root does, the host's files stay plain, and everyday work still works.
func rootFolder(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("only Airlock run as root shares a folder owned by root")
	}
	probe(t)
	top, err := os.MkdirTemp("", "airlock-sec-root-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(top)
	defer removeWatch(top)
	os.Chmod(top, 0o755)
	os.WriteFile(filepath.Join(top, "secret.txt"), []byte(secretText+"\n"), 0o600)
	ws := filepath.Join(top, "root-ws")
	os.Mkdir(ws, 0o755)
	os.WriteFile(filepath.Join(ws, "host.txt"), []byte("from the host\n"), 0o644)
	pb, err := os.ReadFile(filepath.Join(sharedWS, "probe"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(ws, "probe"), pb, 0o755)
	ws, _ = filepath.EvalSymlinks(ws)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sb, err := vmharness.Boot(ctx, image, sandbox.Options{Workspace: ws, MemoryMiB: 256, CPUs: 1})
	if err != nil {
		t.Fatalf("boot the VM on root's folder: %v", err)
	}
	defer vmharness.Close(sb)
	addWatch(top)
	asRoot := func(t testing.TB, cmd string) result {
		return execOn(t, sb, client.Spec{Argv: []string{"sh", "-c", cmd}, Root: true}, "")
	}

	// Everyday work as root in the guest: the host's file is there, and a
	// script can be written, made executable, run, renamed and deleted.
	r := asRoot(t, `cd /workspace && cat host.txt && echo more >> host.txt && printf '#!/bin/sh\necho ran\n' > job.sh && chmod +x job.sh && ./job.sh &&
		mkdir -p out/sub && mv job.sh out/sub/run.sh && out/sub/run.sh && stat -c '%a %u' out/sub/run.sh && echo tmp > t.txt && rm t.txt && ls`)
	if r.Stdout != "from the host\nran\nran\n755 0\nhost.txt\nout\nprobe\n" {
		t.Fatalf("everyday work in root's folder: %s", r)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "host.txt")); string(b) != "from the host\nmore\n" {
		t.Fatalf("the host sees host.txt as %q", b)
	}
	// plain reports whether the host holds name as a plain file nobody but
	// root can use (or not at all).
	plain := func(a *Attack, name string, r result) {
		a.Helper()
		fi, err := os.Lstat(filepath.Join(ws, name))
		if err != nil {
			return
		}
		st := fi.Sys().(*syscall.Stat_t)
		if !fi.Mode().IsRegular() && !fi.IsDir() {
			a.breach("guest root left a %v (rdev %d:%d) named %s in root's folder on the host (%s)",
				fi.Mode().Type(), unix.Major(st.Rdev), unix.Minor(st.Rdev), name, r)
		}
		if fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0 || fi.Mode().Perm()&0o077 != 0 {
			a.breach("guest root left %s with mode %v in root's folder on the host (%s)", name, fi.Mode(), r)
		}
	}
	attack(t, wsFamily, "root's folder: setuid-root executable made by guest root", func(a *Attack) {
		r := asRoot(a, "cp /workspace/probe /workspace/r-suid && chown 0:0 /workspace/r-suid && chmod 4755 /workspace/r-suid && ls -l /workspace/r-suid")
		// The guest refuses the setuid bit itself now; where it did not,
		// the xattr mapping must show it to the guest only.
		if !strings.HasPrefix(r.Stdout, "-rwsr-xr-x") && !refused(r.Out()) {
			a.Fatalf("the guest does not see its own setuid file (the xattr mapping is off): %s", r)
		}
		plain(a, "r-suid", r)
		if out, _ := asUser(1000, filepath.Join(ws, "r-suid"), "euid"); strings.Contains(out, "euid=0") {
			a.breach("host uid 1000 ran the guest's setuid-root program: %q", out)
		}
	})
	attack(t, wsFamily, "root's folder: char device node made by guest root", func(a *Attack) {
		r := asRoot(a, "mknod -m 666 /workspace/r-null c 1 3; mkfifo -m 666 /workspace/r-fifo")
		plain(a, "r-null", r)
		plain(a, "r-fifo", r)
	})
	attack(t, wsFamily, "root's folder: block device node of the host's disk made by guest root", func(a *Attack) {
		var st unix.Stat_t
		unix.Stat(top, &st)
		r := asRoot(a, fmt.Sprintf("mknod -m 666 /workspace/r-disk b %d %d", unix.Major(st.Dev), unix.Minor(st.Dev)))
		plain(a, "r-disk", r)
	})
	attack(t, wsFamily, "root's folder: symlink to a host secret planted by guest root", func(a *Attack) {
		target := filepath.Join(top, "secret.txt")
		r := asRoot(a, "ln -s "+target+" /workspace/r-link; ln -s ../secret.txt /workspace/r-rel; cat /workspace/r-link /workspace/r-rel")
		noSecret(a, r)
		for _, n := range []string{"r-link", "r-rel"} {
			if fi, err := os.Lstat(filepath.Join(ws, n)); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
				a.breach("guest root planted a real symlink %s on the host (a host program following it reads outside the folder)", n)
			}
		}
	})
	attack(t, wsFamily, "root's folder: guest root opens up a host file (chmod 4777, chown)", func(a *Attack) {
		r := asRoot(a, "chmod 4777 /workspace/host.txt; chown 1000:1000 /workspace/host.txt; chmod 777 /workspace/out")
		for _, n := range []string{"host.txt", "out"} {
			fi, err := os.Lstat(filepath.Join(ws, n))
			if err != nil {
				a.Fatal(err)
			}
			st := fi.Sys().(*syscall.Stat_t)
			if fi.Mode()&fs.ModeSetuid != 0 || fi.Mode().Perm()&0o002 != 0 || st.Uid != 0 {
				a.breach("guest root changed the host's %s to %v owned by %d (%s)", n, fi.Mode(), st.Uid, r)
			}
		}
	})
}
