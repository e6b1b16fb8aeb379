package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/airlock-sandbox/airlock/images/manifest"
)

// Image is a verified guest image.
type Image struct {
	Dir    string
	Kernel string
	Initrd string
}

// ImageSearchPath lists the folders a guest image for arch is looked for in,
// in order: $AIRLOCK_IMAGE_DIR, next to the executable (a source checkout's
// bin/, an installed prefix, a macOS app bundle's Resources), then the
// current folder's images/out.
func ImageSearchPath(arch string) []string {
	var dirs []string
	if d := os.Getenv("AIRLOCK_IMAGE_DIR"); d != "" {
		dirs = append(dirs, d, filepath.Join(d, arch))
	}
	if exe, err := os.Executable(); err == nil {
		if exe, err = filepath.EvalSymlinks(exe); err == nil {
			base := filepath.Dir(exe)
			dirs = append(dirs,
				filepath.Join(base, "..", "images", "out", arch),
				filepath.Join(base, "..", "share", "airlock", "images", arch),
				// Inside a macOS app bundle: Contents/MacOS/<exe> → Contents/Resources.
				filepath.Join(base, "..", "Resources", "images", arch),
				filepath.Join(base, "images", arch))
		}
	}
	dirs = append(dirs, filepath.Join("images", "out", arch))
	return dirs
}

// FindImage returns the verified image for the host's architecture from the
// first folder of dirs that has a manifest (ImageSearchPath when dirs is nil).
func FindImage(dirs []string) (Image, error) {
	if dirs == nil {
		dirs = ImageSearchPath(runtime.GOARCH)
	}
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "manifest.json")); err == nil {
			return LoadImage(d)
		}
	}
	return Image{}, fmt.Errorf("no guest image found (looked in %s); build it with `make image`", strings.Join(dirs, ", "))
}

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
	if err := m.Verify(dir); err != nil {
		return Image{}, err
	}
	return Image{Dir: dir, Kernel: m.KernelPath(dir), Initrd: m.InitrdPath(dir)}, nil
}
