package sandbox

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/airlock-sandbox/airlock/images/manifest"
)

func TestImageSearchPathOrder(t *testing.T) {
	root := t.TempDir()
	t.Setenv("AIRLOCK_IMAGE_DIR", root)
	minimal := ImageSearchPathFor(manifest.ImageMinimal, "amd64")
	src, deb := filepath.Join(root, manifest.KernelSourceDir, "amd64"), filepath.Join(root, "amd64")
	if minimal[0] != root {
		t.Errorf("search path starts with %s, want $AIRLOCK_IMAGE_DIR itself (%s)", minimal[0], root)
	}
	i, j := slices.Index(minimal, src), slices.Index(minimal, deb)
	if j < 0 {
		t.Fatalf("search path %v lacks %s", minimal, deb)
	}
	if manifest.SourceKernelFirst(runtime.GOOS, "amd64") != (i >= 0 && i < j) {
		t.Errorf("search path %v: %s before %s is %v on %s", minimal, src, deb, i >= 0 && i < j, runtime.GOOS)
	}
	if arm := ImageSearchPathFor(manifest.ImageMinimal, "arm64"); slices.Contains(arm, filepath.Join(root, manifest.KernelSourceDir, "arm64")) {
		t.Errorf("arm64 search path %v has a kernel-source folder", arm)
	}
	// The Windows installer puts the CLI in bin\ and the image beside it.
	if exe, err := os.Executable(); err == nil {
		exe, _ = filepath.EvalSymlinks(exe)
		if want := filepath.Join(filepath.Dir(exe), "..", "images", "amd64"); !slices.Contains(minimal, want) {
			t.Errorf("search path %v lacks %s", minimal, want)
		}
	}
	std := ImageSearchPathFor(manifest.ImageStandard, "amd64")
	i, j = slices.Index(std, filepath.Join(root, manifest.KernelSourceDir, "standard", "amd64")), slices.Index(std, filepath.Join(root, "standard", "amd64"))
	if j < 0 || manifest.SourceKernelFirst(runtime.GOOS, "amd64") != (i >= 0 && i < j) {
		t.Errorf("standard search path %v on %s", std, runtime.GOOS)
	}
}
