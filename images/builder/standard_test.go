package builder

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/images/manifest"
)

func TestCustomiseRoot(t *testing.T) {
	root := t.TempDir()
	for _, p := range []string{"etc", "var/cache/apt/archives", "var/lib/apt/lists", "var/log", "usr/share/doc/git"} {
		os.MkdirAll(filepath.Join(root, p), 0o755)
	}
	files := map[string]string{
		"etc/passwd": "root:x:0:0::/root:/bin/sh\n", "etc/resolv.conf": "nameserver 10.0.0.1\n",
		"var/cache/apt/archives/git.deb": "deb", "var/lib/apt/lists/x_Packages": "index", "var/log/dpkg.log": "log",
		"usr/share/doc/git/copyright": "GPL", "usr/share/doc/git/changelog.gz": "news",
	}
	for p, c := range files {
		os.WriteFile(filepath.Join(root, p), []byte(c), 0o644)
	}
	if err := customiseRoot(root, rootCustomisation()); err != nil {
		t.Fatal(err)
	}
	exists := func(p string) bool { _, err := os.Lstat(filepath.Join(root, p)); return err == nil }
	for _, gone := range []string{"etc/resolv.conf", "var/cache/apt/archives/git.deb", "var/lib/apt/lists/x_Packages", "var/log/dpkg.log", "usr/share/doc/git/changelog.gz"} {
		if exists(gone) {
			t.Errorf("%s is still there", gone)
		}
	}
	for _, kept := range []string{"usr/share/doc/git/copyright", "var/cache/apt/archives", "home/agent", "workspace", "etc/pip.conf"} {
		if !exists(kept) {
			t.Errorf("%s is missing", kept)
		}
	}
	passwd, _ := os.ReadFile(filepath.Join(root, "etc", "passwd"))
	if string(passwd) != "root:x:0:0::/root:/bin/sh\nagent:x:1000:1000:agent:/home/agent:/bin/bash\n" {
		t.Errorf("passwd:\n%s", passwd)
	}
	ns, _ := os.ReadFile(filepath.Join(root, "etc", "nsswitch.conf"))
	if !strings.Contains(string(ns), "hosts: files\n") || strings.Contains(string(ns), "dns") {
		t.Errorf("nsswitch.conf:\n%s", ns)
	}
}

func TestStandardKeys(t *testing.T) {
	custom := rootCustomisation()
	k := rootDiskKey("amd64", "release1", custom)
	if k != rootDiskKey("amd64", "release1", custom) {
		t.Fatal("the key is not stable")
	}
	for name, other := range map[string]string{
		"arch":    rootDiskKey("arm64", "release1", custom),
		"release": rootDiskKey("amd64", "release2", custom),
		"files":   rootDiskKey("amd64", "release1", custom[1:]),
	} {
		if other == k {
			t.Errorf("a different %s gives the same disk key", name)
		}
	}
	// A new initramfs changes the image's key, not the disk's.
	min1 := &manifest.Manifest{Artifacts: []manifest.Artifact{{Name: "initramfs.cpio", SHA256: "aa"}}}
	min2 := &manifest.Manifest{Artifacts: []manifest.Artifact{{Name: "initramfs.cpio", SHA256: "bb"}}}
	if standardKey(k, min1) == standardKey(k, min2) {
		t.Error("a new initramfs does not change the image key")
	}
}

func TestStandardDir(t *testing.T) {
	for minDir, want := range map[string]string{
		filepath.Join("out", "amd64"):                  filepath.Join("out", "standard", "amd64"),
		filepath.Join("out", "arm64"):                  filepath.Join("out", "standard", "arm64"),
		filepath.Join("out", "kernel-source", "amd64"): filepath.Join("out", "kernel-source", "standard", "amd64"),
	} {
		if got := standardDir(minDir); got != want {
			t.Errorf("standardDir(%s) = %s, want %s", minDir, got, want)
		}
	}
}

// TestLinkRootDisk: the standard image on the other kernel shares a root
// disk of the same inputs that verifies, and builds its own otherwise.
func TestLinkRootDisk(t *testing.T) {
	from := t.TempDir()
	m := &manifest.Manifest{
		SchemaVersion: manifest.SchemaVersion, Arch: "arm64", Image: manifest.ImageStandard,
		KernelVersion: "6.1.0-1-arm64", Kernel: "Image", Initrd: "initramfs.cpio",
		InputKey: "k", BuilderVersion: "test",
		RootDisk: &manifest.RootDisk{File: RootDiskFile, Format: manifest.FormatRawVHD, Label: "airlock-root", DiskSize: 16, Suite: "bookworm", InputKey: "disk-key"},
	}
	// An arm64 Image header: the kernel check wants its magic at 0x38.
	image := make([]byte, 64)
	copy(image[0x38:], "ARM\x64")
	for name, data := range map[string]string{"Image": string(image), "initramfs.cpio": "070701", RootDiskFile: "ext4 and a footer"} {
		p := filepath.Join(from, name)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		a, err := artifact(p, name)
		if err != nil {
			t.Fatal(err)
		}
		m.Artifacts = append(m.Artifacts, a)
	}
	if err := m.Write(from); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	if got, err := manifest.Load(from); err != nil {
		t.Fatal(err)
	} else if err := got.Verify(from); err != nil {
		t.Fatal(err)
	}

	if d := linkRootDisk(from, t.TempDir(), "another-key", log); d != nil {
		t.Errorf("a root disk of other inputs was shared: %+v", d)
	}
	if d := linkRootDisk(t.TempDir(), t.TempDir(), "disk-key", log); d != nil {
		t.Errorf("a folder without an image shared a root disk: %+v", d)
	}
	dir := t.TempDir()
	d := linkRootDisk(from, dir, "disk-key", log)
	if d == nil || d.InputKey != "disk-key" {
		t.Fatalf("linkRootDisk = %+v, want the other image's disk", d)
	}
	if b, err := os.ReadFile(filepath.Join(dir, RootDiskFile)); err != nil || string(b) != "ext4 and a footer" {
		t.Fatalf("linked disk: %q, %v", b, err)
	}
	// A damaged disk is not shared.
	os.WriteFile(filepath.Join(from, RootDiskFile), []byte("ext4 and a footeR"), 0o644)
	if d := linkRootDisk(from, t.TempDir(), "disk-key", log); d != nil {
		t.Errorf("a damaged root disk was shared")
	}
}

// TestLinkOrCopy: on one file system the root disk is hard-linked, not a
// second copy of hundreds of MiB (TestLinkOrCopyAcrossFileSystems, on
// Linux, checks the copy where a link cannot be).
func TestLinkOrCopy(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.WriteFile(src, []byte("root disk"), 0o644); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "dst")
	if err := linkOrCopy(src, dst); err != nil {
		t.Fatal(err)
	}
	a, err1 := os.Stat(src)
	b, err2 := os.Stat(dst)
	if err1 != nil || err2 != nil || !os.SameFile(a, b) {
		t.Fatalf("same file system: not a link (%v, %v)", err1, err2)
	}
}
