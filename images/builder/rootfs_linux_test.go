package builder

import (
	"bytes"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/guest/api"
	"github.com/airlock-sandbox/airlock/images/vhd"
	"golang.org/x/sys/unix"
)

// TestWriteRootDisk builds a real (small) root disk with tar2ext4 and
// checks what the guest and Hyper-V rely on: the ext4 superblock with the
// label init looks for, the files with their owners, modes, links, device
// numbers and extended attributes, a file system e2fsck accepts, the
// fixed-VHD footer, and the same bytes from the same tree and key.
func TestWriteRootDisk(t *testing.T) {
	root := filepath.Join(t.TempDir(), "root")
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	os.MkdirAll(filepath.Join(root, "usr", "bin"), 0o755)
	os.WriteFile(filepath.Join(root, "etc", "passwd"), []byte("root:x:0:0::/root:/bin/sh\n"), 0o644)
	asRoot := os.Geteuid() == 0
	// The customisation gives /home/agent to uid 1000: root's to do. An
	// ordinary user checks the rest with a tree of its own.
	if asRoot {
		if err := customiseRoot(root, rootCustomisation()); err != nil {
			t.Fatal(err)
		}
	}
	big := bytes.Repeat([]byte("airlock "), 300000) // 2.4 MB: more than one extent's worth of writes
	os.WriteFile(filepath.Join(root, "usr", "bin", "tool"), big, 0o755)
	os.WriteFile(filepath.Join(root, "usr", "bin", "su"), []byte("su"), 0o755)
	os.Chmod(filepath.Join(root, "usr", "bin", "su"), os.ModeSetuid|0o755)
	if err := os.Link(filepath.Join(root, "usr", "bin", "tool"), filepath.Join(root, "usr", "bin", "tool2")); err != nil {
		t.Fatal(err)
	}
	os.Symlink("tool", filepath.Join(root, "usr", "bin", "tool-link"))
	if err := unix.Mkfifo(filepath.Join(root, "etc", "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := unix.Lsetxattr(filepath.Join(root, "etc", "passwd"), "user.airlock", []byte("x\x00y"), 0); err != nil {
		t.Fatalf("user xattr (the test's folder must support them): %v", err)
	}
	if asRoot {
		// A device node and a file capability (cap_net_raw+ep, VFS v2).
		if err := unix.Mknod(filepath.Join(root, "etc", "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
			t.Fatal(err)
		}
		capv2 := []byte{0, 0, 0, 2, 0, 0x20, 0, 0, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
		if err := unix.Lsetxattr(filepath.Join(root, "usr", "bin", "tool"), "security.capability", capv2, 0); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	disk := filepath.Join(dir, "root.vhd")
	key := strings.Repeat("0123456789abcdef", 4)
	size, err := writeRootDisk(root, disk, key)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(disk)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	if got, err := vhd.ReadFooter(f, fi.Size()); err != nil || got != size || size%4096 != 0 {
		t.Fatalf("footer: size %d (disk %d), %v", got, size, err)
	}
	foot := make([]byte, vhd.FooterSize)
	f.ReadAt(foot, size)
	if !bytes.Equal(foot[68:84], []byte{0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef}) {
		t.Errorf("footer unique id %x is not the key's", foot[68:84])
	}
	sb := make([]byte, 1024)
	f.ReadAt(sb, 1024)
	if binary.LittleEndian.Uint16(sb[0x38:]) != 0xEF53 || string(bytes.TrimRight(sb[0x78:0x88], "\x00")) != api.RootLabel {
		t.Fatalf("superblock: magic %#x, label %q", binary.LittleEndian.Uint16(sb[0x38:]), sb[0x78:0x88])
	}

	// The same tree and key give the same bytes; another key, another disk.
	again := filepath.Join(dir, "again.vhd")
	if _, err := writeRootDisk(root, again, key); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(disk)
	b, _ := os.ReadFile(again)
	if !bytes.Equal(a, b) {
		t.Error("the same tree and key gave different disks")
	}
	other := filepath.Join(dir, "other.vhd")
	if _, err := writeRootDisk(root, other, strings.Repeat("fedcba9876543210", 4)); err != nil {
		t.Fatal(err)
	}
	if c, _ := os.ReadFile(other); bytes.Equal(a, c) {
		t.Error("another key gave the same disk")
	}

	raw := filepath.Join(dir, "raw.ext4")
	os.WriteFile(raw, a[:size], 0o644)
	if fsck, err := lookTool("e2fsck"); err == nil {
		if out, err := exec.Command(fsck, "-fn", raw).CombinedOutput(); err != nil {
			t.Errorf("e2fsck -fn: %v\n%s", err, out)
		}
	}
	debugfs, err := lookTool("debugfs")
	if err != nil {
		t.Skip("debugfs not installed (apt: e2fsprogs): the files were not checked")
	}
	stat := func(p string) string {
		t.Helper()
		out, err := exec.Command(debugfs, "-R", "stat "+p, raw).CombinedOutput()
		if err != nil {
			t.Fatalf("debugfs stat %s: %v\n%s", p, err, out)
		}
		return string(out)
	}
	for p, want := range map[string][]string{
		"/usr/bin/tool":      {"Type: regular", "Mode:  0755", "Links: 2", "Size: 2400000"},
		"/usr/bin/su":        {"Mode:  04755"},
		"/usr/bin/tool2":     {"Links: 2"},
		"/usr/bin/tool-link": {"Type: symlink", `Fast link dest: "tool"`},
		"/etc/fifo":          {"Type: FIFO", "Mode:  0600"},
		"/etc/passwd":        {"user.airlock (3) = 78 00 79"},
	} {
		got := stat(p)
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: no %q in\n%s", p, w, got)
			}
		}
	}
	if asRoot {
		if got := stat("/home/agent"); !strings.Contains(got, "Type: directory") || !strings.Contains(got, "User:  1000") || !strings.Contains(got, "Group:  1000") {
			t.Errorf("/home/agent:\n%s", got)
		}
		if got := stat("/etc/null"); !strings.Contains(got, "Type: character special") || !strings.Contains(got, "Device major/minor number: 01:03") {
			t.Errorf("/etc/null:\n%s", got)
		}
		if got := stat("/usr/bin/tool"); !strings.Contains(got, "security.capability (20)") {
			t.Errorf("/usr/bin/tool has no file capability:\n%s", got)
		}
	}
	want := "root:x:0:0::/root:/bin/sh\n"
	if asRoot {
		want += "agent:x:1000:1000:agent:/home/agent:/bin/bash\n"
	}
	out, _ := exec.Command(debugfs, "-R", "cat /etc/passwd", raw).CombinedOutput()
	if !strings.Contains(string(out), want) {
		t.Fatalf("/etc/passwd on the disk:\n%s", out)
	}
}
