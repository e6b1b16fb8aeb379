//go:build e2e

package security

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/app/sandbox"
	"github.com/airlock-sandbox/airlock/app/workspace"
	"github.com/airlock-sandbox/airlock/guest/client"
)

const wsFamily = "workspace escape"

// ---- host-side witness: inotify on the folders that hold the shares ----

var watch struct {
	sync.Mutex
	fd   int
	dirs map[int]string // watch descriptor -> folder
	seen []string       // events outside the shares
}

const watchMask = unix.IN_ACCESS | unix.IN_MODIFY | unix.IN_ATTRIB | unix.IN_OPEN | unix.IN_CREATE |
	unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF

// startWatch watches hostRoot (where the share and the secrets are) and
// the secret folder: any event not about the share itself is a breach.
// Stat calls make no events, so the tests' own checks use Lstat only.
func startWatch() {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		fmt.Fprintln(os.Stderr, "security: inotify:", err)
		watch.fd = -1
		return
	}
	watch.fd, watch.dirs = fd, map[int]string{}
	addWatch(hostRoot)
	addWatch(filepath.Join(hostRoot, "secretdir"))
	// A self-test: reading the secret here must show, then start clean.
	os.ReadFile(secret)
	watch.Lock()
	drainWatch()
	if len(watch.seen) == 0 {
		watch.seen = []string{"the inotify witness saw nothing of a read it should have seen"}
	} else {
		watch.seen = nil
	}
	watch.Unlock()
}

func addWatch(dir string) {
	watch.Lock()
	defer watch.Unlock()
	if watch.fd < 0 {
		return
	}
	if wd, err := unix.InotifyAddWatch(watch.fd, dir, watchMask); err == nil {
		watch.dirs[wd] = dir
	}
}

// removeWatch stops watching dir (before the test removes it), keeping
// the events seen so far.
func removeWatch(dir string) {
	watch.Lock()
	defer watch.Unlock()
	if watch.fd < 0 {
		return
	}
	drainWatch()
	for wd, d := range watch.dirs {
		if d == dir {
			unix.InotifyRmWatch(watch.fd, uint32(wd))
			delete(watch.dirs, wd)
		}
	}
}

// stopWatch returns the events seen outside the shares ("" when none).
func stopWatch() string {
	watch.Lock()
	defer watch.Unlock()
	if watch.fd < 0 {
		return "inotify not available"
	}
	defer unix.Close(watch.fd)
	drainWatch()
	sort.Strings(watch.seen)
	return strings.Join(slicesCompact(watch.seen), "; ")
}

// drainWatch reads the pending events into watch.seen; watch is locked.
func drainWatch() {
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(watch.fd, buf)
		if err != nil || n <= 0 {
			break
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+int(ev.Len)]), "\x00")
			off += unix.SizeofInotifyEvent + int(ev.Len)
			dir, ok := watch.dirs[int(ev.Wd)]
			if !ok || ev.Mask&unix.IN_IGNORED != 0 || name == "ws" || name == "ro-ws" || name == "root-ws" {
				continue
			}
			watch.seen = append(watch.seen, fmt.Sprintf("%s/%s mask %#x", dir, name, ev.Mask))
		}
	}
}

func slicesCompact(s []string) []string {
	var out []string
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// secretIntact checks the planted secret on the host without opening it.
func secretIntact(a *Attack) {
	a.Helper()
	fi, err := os.Lstat(secret)
	if err != nil {
		a.breach("the host's secret next to the share is gone: %v", err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Size() != int64(len(secretText)+1) || st.Nlink != 1 || fi.Mode() != 0o644 {
		a.breach("the host's secret next to the share changed: size %d links %d mode %v", fi.Size(), st.Nlink, fi.Mode())
	}
}

// noSecret fails the attack when the guest printed the secret.
func noSecret(a *Attack, r result) {
	a.Helper()
	if strings.Contains(r.Out(), secretText) {
		a.breach("the guest read the host's secret: %s", r)
	}
}

// TestWorkspaceEscape: the guest reaches nothing of the host but the
// share, whatever it does with paths, links and device nodes, and the
// read-only mode holds even for root.
func TestWorkspaceEscape(t *testing.T) {
	t.Parallel()
	p := probe(t)
	rel, _ := filepath.Rel("/", secret) // tmp/airlock-sec-…/secret.txt
	// Links a user's repository might contain, planted on the host.
	os.Symlink("../secret.txt", filepath.Join(sharedWS, "h-rel"))
	os.Symlink(secret, filepath.Join(sharedWS, "h-abs"))
	os.Symlink("..", filepath.Join(sharedWS, "h-dir"))

	// A control: the same routes work inside the share, so the refusals
	// below are about the boundary.
	os.WriteFile(filepath.Join(sharedWS, "inside.txt"), []byte("inside\n"), 0o644)
	os.Symlink("inside.txt", filepath.Join(sharedWS, "h-inside"))
	if r := user(t, "cat /workspace/h-inside && cd /workspace && ln -sf inside.txt g-inside && cat g-inside && "+p+" openat /workspace inside.txt"); r.Stdout != "inside\ninside\nok: \"inside\"\n" {
		t.Fatalf("control: links inside the share: %s", r)
	}

	reads := []struct{ name, cmd string }{
		{"`..` from /workspace", "cat /workspace/../secret.txt /workspace/../../secret.txt /workspace/../secretdir/key; ls -a /workspace/.. /workspace/../.."},
		{"cd .. out of /workspace", "cd /workspace && cd .. && cat secret.txt secretdir/key; cd /workspace/../../../../.. && cat " + rel},
		{"openat(/workspace, ../secret.txt)", p + " openat /workspace ../secret.txt; " + p + " openat /workspace ../../../../../../" + rel},
		{"the secret's absolute host path", "cat " + secret + "; ls " + hostRoot},
		{"relative symlink made in the guest", "ln -s ../secret.txt /workspace/g-rel && cat /workspace/g-rel; ln -s ../../../../../../../" + rel + " /workspace/g-deep && cat /workspace/g-deep"},
		{"absolute symlink made in the guest", "ln -s " + secret + " /workspace/g-abs && cat /workspace/g-abs"},
		{"symlink to the folder holding the share", "ln -s " + hostRoot + " /workspace/g-dir && ls /workspace/g-dir/ && cat /workspace/g-dir/secret.txt"},
		{"host-planted relative symlink", "cat /workspace/h-rel"},
		{"host-planted absolute symlink", "cat /workspace/h-abs"},
		{"host-planted symlink to ..", "ls /workspace/h-dir/; cat /workspace/h-dir/secret.txt /workspace/h-dir/secretdir/key"},
	}
	for _, c := range reads {
		attack(t, wsFamily, c.name, func(a *Attack) {
			a.Parallel()
			noSecret(a, user(a, c.cmd))
			noSecret(a, root(a, c.cmd)) // root in the guest fares no better
			secretIntact(a)
		})
	}
	attack(t, wsFamily, "host-planted symlinks followed by the guest's root, writing", func(a *Attack) {
		r := root(a, "echo pwned > /workspace/h-abs; echo pwned > /workspace/h-rel; echo pwned >> /workspace/h-dir/secret.txt")
		secretIntact(a)
		_ = r
	})
	attack(t, wsFamily, "hard link to a guest file outside the share", func(a *Attack) {
		r := user(a, "ln /etc/passwd /workspace/hl-user")
		r2 := root(a, "ln /init /workspace/hl-root; exec 3</etc/passwd; ln /proc/self/fd/3 /workspace/hl-fd")
		for _, n := range []string{"hl-user", "hl-root", "hl-fd"} {
			if fi, err := os.Lstat(filepath.Join(sharedWS, n)); err == nil && fi.Mode().IsRegular() && fi.Size() > 0 {
				a.breach("a hard link to a file outside the share appeared as %s (%d bytes): %s %s", n, fi.Size(), r, r2)
			}
		}
		secretIntact(a)
	})
	attack(t, wsFamily, "mknod in the workspace as the task user", func(a *Attack) {
		r := user(a, "mknod /workspace/u-null c 1 3")
		if _, err := os.Lstat(filepath.Join(sharedWS, "u-null")); err == nil || r.Exit.Code == 0 {
			a.breach("uid 1000 made a device node: %s", r)
		}
	})
	attack(t, wsFamily, "char device node made by guest root reaches the host", func(a *Attack) {
		r := root(a, "mknod -m 666 /workspace/r-null c 1 3")
		node := filepath.Join(sharedWS, "r-null")
		defer os.Remove(node)
		if fi, err := os.Lstat(node); err == nil && fi.Mode()&fs.ModeDevice != 0 {
			st := fi.Sys().(*syscall.Stat_t)
			a.breach("the host has a device node %d:%d mode %v owned by uid %d in the user's folder (%s)",
				unix.Major(st.Rdev), unix.Minor(st.Rdev), fi.Mode(), st.Uid, r)
		}
	})
	attack(t, wsFamily, "block device node of the host's disk made by guest root", func(a *Attack) {
		var st unix.Stat_t
		unix.Stat(hostRoot, &st)
		maj, min := unix.Major(st.Dev), unix.Minor(st.Dev)
		if _, err := os.Stat(fmt.Sprintf("/sys/dev/block/%d:%d", maj, min)); err != nil {
			maj, min = 8, 0
		}
		r := root(a, fmt.Sprintf("mknod -m 666 /workspace/r-disk b %d %d", maj, min))
		node := filepath.Join(sharedWS, "r-disk")
		defer os.Remove(node)
		fi, err := os.Lstat(node)
		if err != nil || fi.Mode()&fs.ModeDevice == 0 {
			return // refused, or not a device on the host
		}
		// Can another host user read the host's raw disk through it?
		out, _ := asUser(1000, filepath.Join(sharedWS, "probe"), "rawread", node)
		a.breach("the host has block device %d:%d mode %v in the user's folder (the disk holding it); host uid 1000 reading it: %s (%s)",
			maj, min, fi.Mode(), strings.TrimSpace(out), r)
	})
	attack(t, wsFamily, "setuid-root executable made by guest root runs as root on the host", func(a *Attack) {
		r := root(a, "cp /workspace/probe /workspace/r-suid && chown 0:0 /workspace/r-suid && chmod 4755 /workspace/r-suid")
		bin := filepath.Join(sharedWS, "r-suid")
		defer os.Remove(bin)
		fi, err := os.Lstat(bin)
		if err != nil || fi.Mode()&fs.ModeSetuid == 0 {
			return
		}
		// Of root or of the folder's owner, a setuid file the guest wrote
		// runs the guest's program as its owner for whoever starts it.
		if os.Getuid() == 0 {
			if out, _ := asUser(1001, bin, "euid"); strings.Contains(out, "euid=") {
				a.breach("host uid 1001 ran a setuid program the guest's root planted in the share: %q (%s)", strings.TrimSpace(out), r)
			}
		}
		a.breach("the host has a setuid file (mode %v) of uid %d made by the guest in the user's folder (%s)", fi.Mode(), fi.Sys().(*syscall.Stat_t).Uid, r)
	})
	attack(t, wsFamily, "rename the share root", func(a *Attack) {
		before := inode(sharedWS)
		// rename(2) itself: busybox mv would fall back to copying the files
		// out and deleting them, which the guest may do anyway.
		r := user(a, p+" rename /workspace /tmp/w; "+p+" rename /workspace /workspace/../ws2")
		r2 := root(a, p+" rename /workspace /ws2; "+p+" rename /workspace/. /x; "+p+" rename /workspace/ /workspace/sub")
		if strings.Contains(r.Stdout+r2.Stdout, "ok:") {
			a.breach("rename(2) of the share root succeeded in the guest: %s %s", r, r2)
		}
		if inode(sharedWS) != before || user(a, "test -x /workspace/probe && echo ok").Stdout != "ok\n" {
			a.breach("the share root moved: %s %s", r, r2)
		}
	})
	attack(t, wsFamily, "remove the share root", func(a *Attack) {
		before := inode(sharedWS)
		// In a private mount namespace root may unmount and remove the
		// guest's mount point: the host's folder must not notice.
		r := root(a, p+" rmdir /workspace; unshare -m --propagation private sh -c 'umount /workspace && rmdir /workspace && echo removed-in-guest'")
		if strings.Contains(r.Stdout, "ok:") {
			a.breach("rmdir(2) of the share root succeeded: %s", r)
		}
		if inode(sharedWS) != before {
			a.breach("the host's shared folder was removed: %s", r)
		}
		if _, err := os.Lstat(filepath.Join(sharedWS, "probe")); err != nil {
			a.breach("the host's shared folder lost its files: %v (%s)", err, r)
		}
	})
	attack(t, wsFamily, "mount the share a second time and climb out", func(a *Attack) {
		noSecret(a, root(a, "mkdir -p /mnt2 && mount -t virtiofs workspace /mnt2 || mount -t 9p -o trans=virtio,version=9p2000.L workspace /mnt2; ls -a /mnt2/..; cat /mnt2/../secret.txt; umount /mnt2"))
		secretIntact(a)
	})

	t.Run("read-only share", func(t *testing.T) { readOnly(t) })
	t.Run("root's folder", func(t *testing.T) { rootFolder(t) })
}

// asUser runs a host program as uid (another user on the host).
func asUser(uid uint32, prog string, args ...string) (string, error) {
	cmd := exec.Command(prog, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func inode(path string) uint64 {
	var st unix.Stat_t
	if unix.Lstat(path, &st) != nil {
		return 0
	}
	return st.Ino
}

// snapshot describes a folder tree (names, modes, owners, sizes, mtimes,
// contents) so that any change shows.
func snapshot(t testing.TB, dir string) string {
	var b strings.Builder
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			fmt.Fprintf(&b, "%s: %v\n", p, err)
			return nil
		}
		fi, _ := os.Lstat(p)
		st := fi.Sys().(*syscall.Stat_t)
		sum := ""
		if fi.Mode().IsRegular() {
			c, _ := os.ReadFile(p)
			sum = fmt.Sprintf("%x", sha256.Sum256(c))
		}
		fmt.Fprintf(&b, "%s %v %d:%d %d %d %s\n", p, fi.Mode(), st.Uid, st.Gid, fi.Size(), fi.ModTime().UnixNano(), sum)
		return nil
	})
	return b.String()
}

// readOnly boots a second, small VM with a read-only share and attacks it.
func readOnly(t *testing.T) {
	probe(t)
	roRoot, err := os.MkdirTemp("", "airlock-sec-ro-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(roRoot)
	defer removeWatch(roRoot)
	os.Chmod(roRoot, 0o755)
	os.WriteFile(filepath.Join(roRoot, "secret.txt"), []byte(secretText+"\n"), 0o644)
	ws := filepath.Join(roRoot, "ro-ws")
	os.Mkdir(ws, 0o755)
	os.WriteFile(filepath.Join(ws, "in.txt"), []byte("keep me\n"), 0o644)
	os.Mkdir(filepath.Join(ws, "sub"), 0o755)
	os.WriteFile(filepath.Join(ws, "sub", "deep.txt"), []byte("deep\n"), 0o600)
	pb, err := os.ReadFile(filepath.Join(sharedWS, "probe"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(ws, "probe"), pb, 0o755)
	filepath.WalkDir(ws, func(p string, d fs.DirEntry, err error) error { os.Lchown(p, 1000, 1000); return nil })
	ws = ownedByTaskUser(ws)
	uid, gid := workspace.Owner(ws)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sb, err := sandbox.Start(ctx, sandbox.Options{
		Workspace: ws, ReadOnly: true, Image: image, UID: uid, GID: gid, MemoryMiB: 256, CPUs: 1,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatalf("boot the read-only VM: %v", err)
	}
	defer func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer ccancel()
		sb.Close(cctx)
	}()
	addWatch(roRoot)
	before := snapshot(t, ws)
	r := execOn(t, sb, client.Spec{Argv: []string{"sh", "-c", "cat /workspace/in.txt; grep ' /workspace ' /proc/mounts"}}, "")
	if !strings.HasPrefix(r.Stdout, "keep me\n") || !strings.Contains(r.Stdout, " ro,") {
		t.Fatalf("the read-only VM does not show its share read-only: %s", r)
	}
	attacks := []struct {
		name, cmd string
		root      bool
	}{
		{"read-only: create a file", "echo x > /workspace/new.txt", false},
		{"read-only: append to a file", "echo x >> /workspace/in.txt", false},
		{"read-only: truncate a file", ": > /workspace/in.txt", false},
		{"read-only: remove a file", "rm -f /workspace/in.txt /workspace/sub/deep.txt", false},
		{"read-only: make and remove folders", "mkdir /workspace/d; rmdir /workspace/sub", false},
		{"read-only: rename", "mv /workspace/in.txt /workspace/moved.txt", false},
		{"read-only: chmod and touch", "chmod 777 /workspace/in.txt; touch -d 2001-01-01 /workspace/in.txt", false},
		{"read-only: symlink", "ln -s /etc/passwd /workspace/link", false},
		{"read-only: create a file as root", "echo x > /workspace/new.txt", true},
		{"read-only: truncate and remove as root", ": > /workspace/in.txt; rm -rf /workspace/sub", true},
		{"read-only: chown and chmod as root", "chown 0:0 /workspace/in.txt; chmod 4777 /workspace/in.txt", true},
		{"read-only: setxattr as root", "/workspace/probe setxattr /workspace/in.txt", true},
		{"read-only: mknod as root", "mknod /workspace/null c 1 3", true},
		{"read-only: remount rw as root, then write", "mount -o remount,rw /workspace; echo x > /workspace/new.txt; echo x >> /workspace/in.txt", true},
		{"read-only: mount the tag again read-write, then write", "mkdir -p /mnt && mount -t 9p -o trans=virtio,version=9p2000.L,rw workspace /mnt; echo x > /mnt/new.txt; echo x >> /mnt/in.txt; rm -f /mnt/sub/deep.txt", true},
		{"read-only: mount the tag with aname=/.. and read next to it", "mkdir -p /mnt3 && mount -t 9p -o trans=virtio,version=9p2000.L,aname=/.. workspace /mnt3; ls -a /mnt3; cat /mnt3/secret.txt /mnt3/../secret.txt", true},
		{"read-only: `..` and symlinks out of the share", "cat /workspace/../secret.txt; ln -s ../secret.txt /tmp/l; cat /tmp/l /workspace/../../secret.txt", false},
	}
	for _, c := range attacks {
		attack(t, wsFamily, c.name, func(a *Attack) {
			r := execOn(a, sb, client.Spec{Argv: []string{"sh", "-c", c.cmd}, Root: c.root}, "")
			if strings.Contains(r.Out(), secretText) {
				a.breach("the guest read the secret next to the read-only share: %s", r)
			}
			if after := snapshot(a, ws); after != before {
				a.breach("the read-only share changed on the host:\nbefore:\n%s\nafter:\n%s\nguest: %s", before, after, r)
			}
		})
	}
}
