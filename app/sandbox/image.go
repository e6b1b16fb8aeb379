package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/images/manifest"
)

// Image is a verified guest image.
type Image struct {
	Dir    string
	Kernel string
	Initrd string
	// Name is manifest.ImageMinimal or manifest.ImageStandard.
	Name string
	// RootDisk is the read-only root disk (raw ext4 with a VHD footer) of
	// an image that has one, and RootLabel its label; "" otherwise.
	RootDisk, RootLabel string
	// KernelHZ is the kernel's timer rate, 0 when the manifest predates it
	// (vm.Config.KernelHZ).
	KernelHZ int
	// KernelRelease is the kernel's release ("6.1.0-57-amd64" for
	// Debian's, "6.1.192-airlock" for one built from linux-source).
	KernelRelease string
}

// ImageNames are the images Airlock knows, the default first.
var ImageNames = manifest.ImageNames

// DefaultImage is the image used when none is chosen.
const DefaultImage = manifest.ImageMinimal

// CheckImageName returns an error naming the choices when name is not an
// image Airlock knows ("" is the default).
func CheckImageName(name string) error {
	if name == "" || slices.Contains(ImageNames, name) {
		return nil
	}
	return fmt.Errorf("unknown image %q: choose %s", name, strings.Join(ImageNames, " or "))
}

// ImageSearchPath lists the folders a minimal guest image for arch is
// looked for in (ImageSearchPathFor).
func ImageSearchPath(arch string) []string { return ImageSearchPathFor(DefaultImage, arch) }

// ImageSearchPathFor lists the folders image name for arch is looked for
// in, in order: $AIRLOCK_IMAGE_DIR, next to the executable (a source
// checkout's bin/, an installed prefix, a macOS app bundle's Resources),
// then the current folder's images/out; under each, the preferred form
// first (manifest.ImageSubdirs).
func ImageSearchPathFor(name, arch string) []string {
	subs := manifest.ImageSubdirs(name, runtime.GOOS, arch)
	var dirs []string
	under := func(base string) {
		for _, sub := range subs {
			dirs = append(dirs, filepath.Join(base, sub))
		}
	}
	if d := os.Getenv("AIRLOCK_IMAGE_DIR"); d != "" {
		dirs = append(dirs, d)
		under(d)
	}
	if exe, err := os.Executable(); err == nil {
		if exe, err = filepath.EvalSymlinks(exe); err == nil {
			base := filepath.Dir(exe)
			under(filepath.Join(base, "..", "images", "out"))
			under(filepath.Join(base, "..", "share", "airlock", "images"))
			// Inside a macOS app bundle: Contents/MacOS/<exe> → Contents/Resources.
			under(filepath.Join(base, "..", "Resources", "images"))
			under(filepath.Join(base, "images"))
			// The Windows installer's layout: the CLI in <dir>\bin (apart
			// from the desktop app's Airlock.exe, the same name to Windows),
			// the image in <dir>\images.
			under(filepath.Join(base, "..", "images"))
		}
	}
	under(filepath.Join("images", "out"))
	return dirs
}

// ImageDirUnder is the folder under the images folder root that image name
// for arch is taken from on this host (manifest.DirUnder): the tests and
// the benchmark boot what the product boots with it.
func ImageDirUnder(root, name, arch string) string {
	return manifest.DirUnder(root, name, runtime.GOOS, arch)
}

// FindImage returns the verified minimal image (FindNamedImage).
func FindImage(dirs []string) (Image, error) { return FindNamedImage(DefaultImage, dirs) }

// FindNamedImage returns the verified image name for the host's
// architecture from the first folder of dirs whose manifest is that image
// (ImageSearchPathFor when dirs is nil).
func FindNamedImage(name string, dirs []string) (Image, error) {
	if err := CheckImageName(name); err != nil {
		return Image{}, err
	}
	if name == "" {
		name = DefaultImage
	}
	if dirs == nil {
		dirs = ImageSearchPathFor(name, runtime.GOARCH)
	}
	for _, d := range dirs {
		m, err := manifest.Load(d)
		if err != nil || m.Name() != name {
			continue
		}
		return LoadImage(d)
	}
	hint := manifest.RebuildHint
	if name == manifest.ImageStandard {
		hint = manifest.RebuildHintStandard
	}
	return Image{}, fmt.Errorf("no %s guest image found (looked in %s): set AIRLOCK_IMAGE_DIR to the folder that holds it, or build it with `%s`", name, strings.Join(dirs, ", "), hint)
}

// imageDigests remembers the digests of image artifacts that LoadImage
// verified, in the user's cache folder, so that an unchanged image is not
// hashed at every start (manifest.DigestCache).
var imageDigests = func() *manifest.DigestCache {
	dir, err := os.UserCacheDir()
	if err != nil {
		return nil
	}
	return &manifest.DigestCache{Path: filepath.Join(dir, "airlock", "image-digests.json")}
}()

// LoadImage reads and verifies the image in dir: every artifact must match
// its manifest, and the kernel must be in the form the platform boots.
func LoadImage(dir string) (Image, error) {
	// The hypervisor does not run in the caller's folder.
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	m, err := manifest.Load(dir)
	if err != nil {
		return Image{}, err
	}
	if err := m.VerifyCached(dir, imageDigests); err != nil {
		return Image{}, err
	}
	img := Image{Dir: dir, Kernel: m.KernelPath(dir), Initrd: m.InitrdPath(dir), Name: m.Name(), RootDisk: m.RootDiskPath(dir), KernelHZ: m.KernelHZ, KernelRelease: m.KernelVersion}
	if m.RootDisk != nil {
		img.RootLabel = m.RootDisk.Label
	}
	return img, nil
}
