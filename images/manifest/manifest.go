// Package manifest describes a built guest image: the manifest.json the
// image builder writes next to the kernel and initramfs, and the checks the
// host runs before it boots them (every artifact present with its recorded
// size and sha256, and a kernel in a format the hypervisor can load
// directly). It is plain Go with no platform code, so it is tested anywhere.
package manifest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/airlock-sandbox/airlock/internal/atomicfile"
)

// FileName is the manifest's name inside an image folder.
const FileName = "manifest.json"

// SchemaVersion is the manifest format this package writes and reads.
// Bump it when a field changes meaning; Load refuses other versions.
const SchemaVersion = 1

// RebuildHint is the command a user runs to (re)build the guest image;
// RebuildHintStandard the one for the standard image.
const (
	RebuildHint         = "make image"
	RebuildHintStandard = "make image-standard"
)

func (m *Manifest) rebuildHint() string {
	if m.Name() == ImageStandard {
		return RebuildHintStandard
	}
	return RebuildHint
}

// Errors returned (wrapped) by Load and Verify, for errors.Is.
var (
	// ErrIncomplete means the manifest or an artifact it lists is missing.
	ErrIncomplete = errors.New("guest image is incomplete")
	// ErrCorrupt means the manifest is unreadable or an artifact does not
	// match its recorded size or sha256.
	ErrCorrupt = errors.New("guest image is corrupt")
)

// Manifest records what a guest image for one architecture was built from
// and what it contains.
type Manifest struct {
	// SchemaVersion is the format version (SchemaVersion).
	SchemaVersion int `json:"schema_version"`
	// Arch is the Go name of the guest architecture: "amd64" or "arm64".
	Arch string `json:"arch"`
	// KernelVersion is the kernel release, as in /lib/modules/<release>.
	KernelVersion string `json:"kernel_version"`
	// Kernel and Initrd are artifact file names relative to the image folder.
	Kernel string `json:"kernel"`
	Initrd string `json:"initrd"`
	// Packages are the Debian packages the image was built from.
	Packages []Package `json:"packages"`
	// Artifacts are the files the host needs, with their size and hash.
	Artifacts []Artifact `json:"artifacts"`
	// Modules are the kernel module names in the order the guest loads them.
	Modules []string `json:"modules"`
	// KernelHZ is the kernel's timer rate (CONFIG_HZ) from its build
	// config; 0 in images written before it was recorded. The host needs
	// it to tell the guest kernel its delay-loop calibration (vm/qemu).
	KernelHZ int `json:"kernel_hz,omitempty"`
	// KernelConfig is set when the kernel was built from Debian's
	// linux-source (airlock-image -kernel source; Packages then names
	// linux-source-* instead of linux-image-*): the sha256 of the config
	// fragment it was built with. Empty for Debian's packaged kernel.
	KernelConfig string `json:"kernel_config,omitempty"`
	// InputKey identifies every input of the build; equal keys mean a
	// rebuild would produce the same artifacts.
	InputKey string `json:"input_key"`
	// BuilderVersion is the version of the builder that wrote the image.
	BuilderVersion string `json:"builder_version"`
	// Image names the image: ImageMinimal (also when empty, as in
	// manifests written before there was a choice) or ImageStandard.
	Image string `json:"image,omitempty"`
	// RootDisk describes the root file system disk of an image that boots
	// from one (standard); nil for an initramfs-only image.
	RootDisk *RootDisk `json:"root_disk,omitempty"`
}

// MaxKernelHZ bounds Manifest.KernelHZ (Linux offers 100 to 1000).
const MaxKernelHZ = 10000

// Image names.
const (
	// ImageMinimal is the kernel and the busybox initramfs, nothing else.
	ImageMinimal = "minimal"
	// ImageStandard adds a read-only Debian root disk (python3, git, ...).
	ImageStandard = "standard"
)

// ImageNames are the images Airlock knows, default first.
var ImageNames = []string{ImageMinimal, ImageStandard}

// KernelSourceDir is the folder, under an images folder, of the minimal
// images whose kernel was built from Debian's linux-source with every
// driver built in (<images>/kernel-source/<arch>/, amd64 only): what QEMU
// boots on a Linux amd64 host when it is there. <images>/<arch>/ keeps
// Debian's packaged kernel and its modules: the portable image (Hyper-V's
// drivers, the standard image's kernel).
const KernelSourceDir = "kernel-source"

// ImageSubdirs are the folders of image name for arch, relative to an
// images folder, the preferred first: <arch> for minimal, standard/<arch>
// for standard, each after its kernel-source/ twin on a host that boots
// that (SourceKernelFirst).
func ImageSubdirs(name, goos, arch string) []string {
	sub := arch
	if name != "" && name != ImageMinimal {
		sub = filepath.Join(name, arch)
	}
	if SourceKernelFirst(goos, arch) {
		return []string{filepath.Join(KernelSourceDir, sub), sub}
	}
	return []string{sub}
}

// SourceKernelFirst reports whether an image with the kernel built from
// linux-source (amd64 only, every driver built in, no Hyper-V drivers) is
// preferred to Debian's kernel: on a Linux host, where QEMU boots it, it
// is ready in about half the time (no modules to load under emulation;
// docs/performance.md). Windows (Hyper-V) and macOS keep Debian's kernel.
func SourceKernelFirst(goos, arch string) bool { return goos == "linux" && arch == "amd64" }

// DirUnder is the folder under the images folder root that image name for
// arch is taken from on goos: the first of its ImageSubdirs that has a
// manifest, else the last (whose absence the caller then reports).
func DirUnder(root, name, goos, arch string) string {
	subs := ImageSubdirs(name, goos, arch)
	for _, sub := range subs {
		if _, err := os.Stat(filepath.Join(root, sub, FileName)); err == nil {
			return filepath.Join(root, sub)
		}
	}
	return filepath.Join(root, subs[len(subs)-1])
}

// RootDisk is a read-only root file system the guest's init mounts below
// a writable layer.
type RootDisk struct {
	// File is the artifact holding the disk: a raw ext4 file system
	// followed by a fixed-VHD footer (FormatRawVHD), so QEMU and vz attach
	// it as a raw disk and Hyper-V as a VHD.
	File string `json:"file"`
	// Format is FormatRawVHD.
	Format string `json:"format"`
	// Label is the ext4 label the guest finds the disk by.
	Label string `json:"label"`
	// DiskSize is the size of the raw disk, without the VHD footer.
	DiskSize int64 `json:"disk_size"`
	// Version identifies the root file system's recipe (package list,
	// customisation); Suite and Mirror are the Debian release it came from.
	Version string `json:"version"`
	Suite   string `json:"suite"`
	Mirror  string `json:"mirror"`
	// Packages are the Debian packages installed in it (SHA256 empty).
	Packages []Package `json:"packages"`
	// InputKey identifies the disk's inputs alone, so a new kernel or
	// guest agent reuses the disk.
	InputKey string `json:"input_key"`
}

// FormatRawVHD is a raw disk image with a 512-byte fixed-VHD footer.
const FormatRawVHD = "raw+vhd-footer"

// Name is the image's name, ImageMinimal when the manifest does not say.
func (m *Manifest) Name() string {
	if m.Image == "" {
		return ImageMinimal
	}
	return m.Image
}

// Package is one Debian package the image was built from.
type Package struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Arch    string `json:"arch"`
	// SHA256 is the hex sha256 of the .deb file.
	SHA256 string `json:"sha256"`
}

// Artifact is one file of the image.
type Artifact struct {
	// Name is the file name relative to the image folder.
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Load reads dir/manifest.json. A missing file wraps ErrIncomplete, an
// unreadable or inconsistent one ErrCorrupt.
func Load(dir string) (*Manifest, error) {
	path := filepath.Join(dir, FileName)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, imageErr(ErrIncomplete, "guest image in %s is incomplete: %s missing (run %q)", dir, FileName, RebuildHint)
	}
	if err != nil {
		return nil, fmt.Errorf("manifest: load: %w", err)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, imageErr(ErrCorrupt, "guest image manifest %s is not valid JSON (%v); rebuild with %s", path, err, RebuildHint)
	}
	if err := m.validate(); err != nil {
		return nil, imageErr(ErrCorrupt, "guest image manifest %s: %v; rebuild with %s", path, err, RebuildHint)
	}
	return &m, nil
}

func (m *Manifest) validate() error {
	switch {
	case m.SchemaVersion != SchemaVersion:
		return fmt.Errorf("schema version %d, this Airlock reads version %d", m.SchemaVersion, SchemaVersion)
	case m.Arch != "amd64" && m.Arch != "arm64":
		return fmt.Errorf("unknown architecture %q", m.Arch)
	case m.Kernel == "" || m.Initrd == "":
		return errors.New("kernel or initrd not named")
	case m.artifact(m.Kernel) == nil:
		return fmt.Errorf("kernel %q is not among the artifacts", m.Kernel)
	case m.artifact(m.Initrd) == nil:
		return fmt.Errorf("initrd %q is not among the artifacts", m.Initrd)
	case m.KernelHZ < 0 || m.KernelHZ > MaxKernelHZ:
		return fmt.Errorf("kernel timer rate %d Hz, want 0 (unknown) to %d", m.KernelHZ, MaxKernelHZ)
	case m.Image != "" && m.Image != ImageMinimal && m.Image != ImageStandard:
		return fmt.Errorf("unknown image %q", m.Image)
	case m.RootDisk != nil && m.artifact(m.RootDisk.File) == nil:
		return fmt.Errorf("root disk %q is not among the artifacts", m.RootDisk.File)
	case m.RootDisk != nil && (m.RootDisk.Format != FormatRawVHD || m.RootDisk.Label == ""):
		return fmt.Errorf("root disk %q: format %q, label %q: want format %q and a label", m.RootDisk.File, m.RootDisk.Format, m.RootDisk.Label, FormatRawVHD)
	case m.Name() == ImageStandard && m.RootDisk == nil:
		return errors.New("the standard image has no root disk")
	}
	for _, a := range m.Artifacts {
		if !filepath.IsLocal(a.Name) || filepath.Base(a.Name) != a.Name {
			return fmt.Errorf("artifact name %q is not a plain file name", a.Name)
		}
	}
	return nil
}

func (m *Manifest) artifact(name string) *Artifact {
	for i := range m.Artifacts {
		if m.Artifacts[i].Name == name {
			return &m.Artifacts[i]
		}
	}
	return nil
}

// role names an artifact the way a user thinks of it.
func (m *Manifest) role(name string) string {
	switch name {
	case m.Kernel:
		return "kernel"
	case m.Initrd:
		return "initramfs"
	}
	if m.RootDisk != nil && name == m.RootDisk.File {
		return "root disk"
	}
	return name
}

// KernelPath returns the kernel's path inside the image folder dir.
func (m *Manifest) KernelPath(dir string) string { return filepath.Join(dir, m.Kernel) }

// InitrdPath returns the initramfs's path inside the image folder dir.
func (m *Manifest) InitrdPath(dir string) string { return filepath.Join(dir, m.Initrd) }

// RootDiskPath returns the root disk's path inside dir, or "" when the
// image has none.
func (m *Manifest) RootDiskPath(dir string) string {
	if m.RootDisk == nil {
		return ""
	}
	return filepath.Join(dir, m.RootDisk.File)
}

// Verify checks that every artifact exists in dir with its recorded size and
// sha256, and that the kernel is in a format the host can boot directly.
// Errors wrap ErrIncomplete or ErrCorrupt and say how to fix them.
func (m *Manifest) Verify(dir string) error { return m.VerifyCached(dir, nil) }

// VerifyCached is Verify with the artifacts' digests remembered in c (nil:
// none), so that an unchanged image is not hashed again at every start.
func (m *Manifest) VerifyCached(dir string, c *DigestCache) error {
	if err := m.validate(); err != nil {
		return imageErr(ErrCorrupt, "guest image in %s: %v; rebuild with %s", dir, err, m.rebuildHint())
	}
	for _, a := range m.Artifacts {
		path := filepath.Join(dir, a.Name)
		fi, err := os.Stat(path)
		if errors.Is(err, fs.ErrNotExist) {
			return imageErr(ErrIncomplete, "guest image in %s is incomplete: %s missing (run %q)", dir, m.role(a.Name), m.rebuildHint())
		}
		if err != nil {
			return fmt.Errorf("manifest: verify %s: %w", path, err)
		}
		if !fi.Mode().IsRegular() {
			return imageErr(ErrCorrupt, "guest image in %s: %s (%s) is not a regular file; rebuild with %s", dir, m.role(a.Name), a.Name, m.rebuildHint())
		}
		if fi.Size() != a.Size {
			return imageErr(ErrCorrupt, "%s in %s does not match its manifest (size %d, manifest says %d); rebuild with %s", m.role(a.Name), dir, fi.Size(), a.Size, m.rebuildHint())
		}
		sum, err := c.sum(path, fi)
		if err != nil {
			return fmt.Errorf("manifest: verify: %w", err)
		}
		if sum != a.SHA256 {
			return imageErr(ErrCorrupt, "%s in %s does not match its manifest (sha256 %s, manifest says %s); rebuild with %s", m.role(a.Name), dir, short(sum), short(a.SHA256), m.rebuildHint())
		}
	}
	if err := CheckKernelFile(m.Arch, m.KernelPath(dir)); err != nil {
		return imageErr(ErrCorrupt, "guest image in %s: %v; rebuild with %s", dir, err, m.rebuildHint())
	}
	return nil
}

func short(sum string) string {
	if len(sum) > 12 {
		return sum[:12] + "…"
	}
	return sum
}

// imageError is a user-facing message that still matches its sentinel with
// errors.Is, without repeating the sentinel's text.
type imageError struct {
	kind error
	msg  string
}

func (e *imageError) Error() string { return e.msg }
func (e *imageError) Unwrap() error { return e.kind }

func imageErr(kind error, format string, args ...any) error {
	return &imageError{kind: kind, msg: fmt.Sprintf(format, args...)}
}

// Write stores m as dir/manifest.json atomically: a reader sees the old
// manifest or the new one, never a partial file.
func (m *Manifest) Write(dir string) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("manifest: write: %w", err)
	}
	if err := atomicfile.Write(filepath.Join(dir, FileName), append(b, '\n'), 0o644, atomicfile.Synced); err != nil {
		return fmt.Errorf("manifest: write: %w", err)
	}
	return nil
}

// FileSHA256 returns the hex sha256 of the file at path.
func FileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
