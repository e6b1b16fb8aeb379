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
)

// FileName is the manifest's name inside an image folder.
const FileName = "manifest.json"

// SchemaVersion is the manifest format this package writes and reads.
// Bump it when a field changes meaning; Load refuses other versions.
const SchemaVersion = 1

// RebuildHint is the command a user runs to (re)build the guest image.
const RebuildHint = "make image"

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
	// InputKey identifies every input of the build; equal keys mean a
	// rebuild would produce the same artifacts.
	InputKey string `json:"input_key"`
	// BuilderVersion is the version of the builder that wrote the image.
	BuilderVersion string `json:"builder_version"`
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
	return name
}

// KernelPath returns the kernel's path inside the image folder dir.
func (m *Manifest) KernelPath(dir string) string { return filepath.Join(dir, m.Kernel) }

// InitrdPath returns the initramfs's path inside the image folder dir.
func (m *Manifest) InitrdPath(dir string) string { return filepath.Join(dir, m.Initrd) }

// Verify checks that every artifact exists in dir with its recorded size and
// sha256, and that the kernel is in a format the host can boot directly.
// Errors wrap ErrIncomplete or ErrCorrupt and say how to fix them.
func (m *Manifest) Verify(dir string) error {
	if err := m.validate(); err != nil {
		return imageErr(ErrCorrupt, "guest image in %s: %v; rebuild with %s", dir, err, RebuildHint)
	}
	for _, a := range m.Artifacts {
		path := filepath.Join(dir, a.Name)
		fi, err := os.Stat(path)
		if errors.Is(err, fs.ErrNotExist) {
			return imageErr(ErrIncomplete, "guest image in %s is incomplete: %s missing (run %q)", dir, m.role(a.Name), RebuildHint)
		}
		if err != nil {
			return fmt.Errorf("manifest: verify %s: %w", path, err)
		}
		if !fi.Mode().IsRegular() {
			return imageErr(ErrCorrupt, "guest image in %s: %s (%s) is not a regular file; rebuild with %s", dir, m.role(a.Name), a.Name, RebuildHint)
		}
		if fi.Size() != a.Size {
			return imageErr(ErrCorrupt, "%s in %s does not match its manifest (size %d, manifest says %d); rebuild with %s", m.role(a.Name), dir, fi.Size(), a.Size, RebuildHint)
		}
		sum, err := FileSHA256(path)
		if err != nil {
			return fmt.Errorf("manifest: verify: %w", err)
		}
		if sum != a.SHA256 {
			return imageErr(ErrCorrupt, "%s in %s does not match its manifest (sha256 %s, manifest says %s); rebuild with %s", m.role(a.Name), dir, short(sum), short(a.SHA256), RebuildHint)
		}
	}
	if err := CheckKernelFile(m.Arch, m.KernelPath(dir)); err != nil {
		return imageErr(ErrCorrupt, "guest image in %s: %v; rebuild with %s", dir, err, RebuildHint)
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
	tmp, err := os.CreateTemp(dir, "."+FileName+".*")
	if err != nil {
		return fmt.Errorf("manifest: write: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op after a successful rename
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("manifest: write: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("manifest: write: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("manifest: write: %w", err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("manifest: write: %w", err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, FileName)); err != nil {
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
