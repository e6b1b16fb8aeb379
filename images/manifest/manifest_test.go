package manifest

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// writeImage writes a valid arm64 image (synthetic kernel and initrd plus
// manifest) into a new folder and returns the folder and manifest.
func writeImage(t *testing.T) (string, *Manifest) {
	t.Helper()
	dir := t.TempDir()
	files := map[string][]byte{"Image": arm64Image(), "initramfs.cpio": []byte("070701 not really a cpio")}
	m := &Manifest{
		SchemaVersion:  SchemaVersion,
		Arch:           "arm64",
		KernelVersion:  "6.1.0-1-arm64",
		Kernel:         "Image",
		Initrd:         "initramfs.cpio",
		Packages:       []Package{{Name: "linux-image-6.1.0-1-arm64", Version: "6.1.1-1", Arch: "arm64", SHA256: strings.Repeat("ab", 32)}},
		Modules:        []string{"virtio", "virtio_pci"},
		InputKey:       strings.Repeat("cd", 32),
		BuilderVersion: "test",
	}
	for _, name := range []string{"Image", "initramfs.cpio"} {
		data := files[name]
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		m.Artifacts = append(m.Artifacts, Artifact{Name: name, Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:])})
	}
	if err := m.Write(dir); err != nil {
		t.Fatal(err)
	}
	return dir, m
}

func TestLoadRoundTrip(t *testing.T) {
	dir, want := writeImage(t)
	got, err := Load(dir)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if got.InputKey != want.InputKey || len(got.Artifacts) != 2 || got.Modules[1] != "virtio_pci" {
		t.Errorf("Load = %+v, want %+v", got, want)
	}
	if err := got.Verify(dir); err != nil {
		t.Errorf("Verify: %v", err)
	}
	if p := got.KernelPath(dir); p != filepath.Join(dir, "Image") {
		t.Errorf("KernelPath = %s", p)
	}
	if p := got.InitrdPath(dir); p != filepath.Join(dir, "initramfs.cpio") {
		t.Errorf("InitrdPath = %s", p)
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name     string
		manifest string // "" means no manifest file
		wantIs   error
		wantText string
	}{
		{"missing", "", ErrIncomplete, `manifest.json missing (run "make image")`},
		{"bad JSON", "{not json", ErrCorrupt, "is not valid JSON"},
		{"future schema", `{"schema_version": 99, "arch": "arm64"}`, ErrCorrupt, "schema version 99"},
		{"unknown arch", `{"schema_version": 1, "arch": "mips"}`, ErrCorrupt, `unknown architecture "mips"`},
		{"kernel not an artifact", `{"schema_version": 1, "arch": "arm64", "kernel": "Image", "initrd": "i"}`, ErrCorrupt, "not among the artifacts"},
		{"artifact escapes the folder", `{"schema_version": 1, "arch": "arm64", "kernel": "../Image", "initrd": "i",
			"artifacts": [{"name": "../Image"}, {"name": "i"}]}`, ErrCorrupt, "not a plain file name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if tt.manifest != "" {
				if err := os.WriteFile(filepath.Join(dir, FileName), []byte(tt.manifest), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			_, err := Load(dir)
			if !errors.Is(err, tt.wantIs) {
				t.Fatalf("Load error %v, want errors.Is %v", err, tt.wantIs)
			}
			if !strings.Contains(err.Error(), tt.wantText) || !strings.Contains(err.Error(), dir) {
				t.Errorf("Load error %q should contain %q and the folder", err, tt.wantText)
			}
		})
	}
}

func TestVerifyErrors(t *testing.T) {
	tests := []struct {
		name     string
		damage   func(t *testing.T, dir string, m *Manifest)
		wantIs   error
		wantText string
	}{
		{"initramfs missing", func(t *testing.T, dir string, m *Manifest) {
			remove(t, filepath.Join(dir, "initramfs.cpio"))
		}, ErrIncomplete, `is incomplete: initramfs missing (run "make image")`},
		{"kernel missing", func(t *testing.T, dir string, m *Manifest) {
			remove(t, filepath.Join(dir, "Image"))
		}, ErrIncomplete, "is incomplete: kernel missing"},
		{"wrong size", func(t *testing.T, dir string, m *Manifest) {
			appendTo(t, filepath.Join(dir, "initramfs.cpio"), "more")
		}, ErrCorrupt, "does not match its manifest (size 28, manifest says 24)"},
		{"wrong hash", func(t *testing.T, dir string, m *Manifest) {
			p := filepath.Join(dir, "initramfs.cpio")
			b, _ := os.ReadFile(p)
			b[0] ^= 0xff
			write(t, p, b)
		}, ErrCorrupt, "does not match its manifest (sha256 "},
		{"artifact is a folder", func(t *testing.T, dir string, m *Manifest) {
			remove(t, filepath.Join(dir, "initramfs.cpio"))
			if err := os.Mkdir(filepath.Join(dir, "initramfs.cpio"), 0o755); err != nil {
				t.Fatal(err)
			}
		}, ErrCorrupt, "not a regular file"},
		{"kernel in the wrong format", func(t *testing.T, dir string, m *Manifest) {
			data := withMagic("\x1f\x8b\x08")
			write(t, filepath.Join(dir, "Image"), data)
			sum := sha256.Sum256(data)
			m.Artifacts[0] = Artifact{Name: "Image", Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:])}
		}, ErrCorrupt, "kernel is gzip-compressed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, m := writeImage(t)
			tt.damage(t, dir, m)
			err := m.Verify(dir)
			if !errors.Is(err, tt.wantIs) {
				t.Fatalf("Verify error %v, want errors.Is %v", err, tt.wantIs)
			}
			if !strings.Contains(err.Error(), tt.wantText) {
				t.Errorf("Verify error %q does not contain %q", err, tt.wantText)
			}
			if tt.wantIs == ErrCorrupt && !strings.Contains(err.Error(), "rebuild with make image") {
				t.Errorf("Verify error %q does not say how to fix it", err)
			}
		})
	}
}

func TestWriteLeavesNoTempFiles(t *testing.T) {
	dir, _ := writeImage(t)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}
}

func remove(t *testing.T, p string) {
	t.Helper()
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
}

func write(t *testing.T, p string, b []byte) {
	t.Helper()
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func appendTo(t *testing.T, p, s string) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

func TestStandardManifest(t *testing.T) {
	dir, m := writeImage(t)
	disk := []byte("ext4 and a footer")
	if err := os.WriteFile(filepath.Join(dir, "root.vhd"), disk, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(disk)
	m.Artifacts = append(m.Artifacts, Artifact{Name: "root.vhd", Size: int64(len(disk)), SHA256: hex.EncodeToString(sum[:])})
	m.Image = ImageStandard
	m.RootDisk = &RootDisk{File: "root.vhd", Format: FormatRawVHD, Label: "airlock-root", DiskSize: 16, Suite: "bookworm"}
	if err := m.Write(dir); err != nil {
		t.Fatal(err)
	}
	got, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.Name() != ImageStandard || got.RootDiskPath(dir) != filepath.Join(dir, "root.vhd") || got.Verify(dir) != nil {
		t.Fatalf("standard manifest: %+v", got)
	}
	// A damaged root disk is caught like any artifact, and the hint names
	// the standard image's build.
	os.WriteFile(filepath.Join(dir, "root.vhd"), []byte("ext4 and a footeR"), 0o644)
	if err := got.Verify(dir); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "root disk") || !strings.Contains(err.Error(), RebuildHintStandard) {
		t.Fatalf("Verify of a damaged root disk: %v", err)
	}

	for name, edit := range map[string]func(*Manifest){
		"disk not an artifact":  func(m *Manifest) { m.RootDisk.File = "other.vhd" },
		"unknown format":        func(m *Manifest) { m.RootDisk.Format = "qcow2" },
		"no label":              func(m *Manifest) { m.RootDisk.Label = "" },
		"standard without disk": func(m *Manifest) { m.RootDisk = nil },
		"unknown image":         func(m *Manifest) { m.Image = "huge" },
		"negative timer rate":   func(m *Manifest) { m.KernelHZ = -250 },
		"absurd timer rate":     func(m *Manifest) { m.KernelHZ = MaxKernelHZ + 1 },
	} {
		bad := *got
		rd := *got.RootDisk
		bad.RootDisk = &rd
		edit(&bad)
		if err := bad.validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if (&Manifest{}).Name() != ImageMinimal {
		t.Error("a manifest that names no image is not the minimal one")
	}
}

// TestSourceKernelFirst: only QEMU on a Linux amd64 host prefers the
// kernel built from linux-source; Hyper-V needs Debian's modules and
// arm64 has no such kernel.
func TestSourceKernelFirst(t *testing.T) {
	for _, tt := range []struct {
		goos, arch string
		want       bool
	}{
		{"linux", "amd64", true},
		{"linux", "arm64", false},
		{"windows", "amd64", false},
		{"darwin", "amd64", false},
		{"darwin", "arm64", false},
	} {
		if got := SourceKernelFirst(tt.goos, tt.arch); got != tt.want {
			t.Errorf("SourceKernelFirst(%s, %s) = %v, want %v", tt.goos, tt.arch, got, tt.want)
		}
	}
}

func TestDirUnder(t *testing.T) {
	root := t.TempDir()
	deb := filepath.Join(root, "amd64")
	src := filepath.Join(root, KernelSourceDir, "amd64")
	// Nothing built: the portable form, whose absence the caller reports.
	if got := DirUnder(root, ImageMinimal, "linux", "amd64"); got != deb {
		t.Errorf("no image: DirUnder = %s, want %s", got, deb)
	}
	for _, d := range []string{deb, src} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Folders without a manifest do not count.
	if got := DirUnder(root, ImageMinimal, "linux", "amd64"); got != deb {
		t.Errorf("empty folders: DirUnder = %s, want %s", got, deb)
	}
	if err := os.WriteFile(filepath.Join(src, FileName), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	for goos, want := range map[string]string{"linux": src, "windows": deb, "darwin": deb} {
		if got := DirUnder(root, ImageMinimal, goos, "amd64"); got != want {
			t.Errorf("DirUnder on %s = %s, want %s", goos, got, want)
		}
	}
	if got := DirUnder(root, ImageStandard, "linux", "amd64"); got != filepath.Join(root, "standard", "amd64") {
		t.Errorf("standard, none built: DirUnder = %s", got)
	}
	if got, want := ImageSubdirs(ImageStandard, "linux", "amd64"), []string{filepath.Join(KernelSourceDir, "standard", "amd64"), filepath.Join("standard", "amd64")}; !slices.Equal(got, want) {
		t.Errorf("ImageSubdirs(standard, linux, amd64) = %v, want %v", got, want)
	}
}
