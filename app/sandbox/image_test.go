package sandbox

import (
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/airlock-sandbox/airlock/images/manifest"
)

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
		if got := sourceKernelFirst(tt.goos, tt.arch); got != tt.want {
			t.Errorf("sourceKernelFirst(%s, %s) = %v, want %v", tt.goos, tt.arch, got, tt.want)
		}
	}
}

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
	if sourceKernelFirst(runtime.GOOS, "amd64") != (i >= 0 && i < j) {
		t.Errorf("search path %v: %s before %s is %v on %s", minimal, src, deb, i >= 0 && i < j, runtime.GOOS)
	}
	if arm := ImageSearchPathFor(manifest.ImageMinimal, "arm64"); slices.Contains(arm, filepath.Join(root, manifest.KernelSourceDir, "arm64")) {
		t.Errorf("arm64 search path %v has a kernel-source folder", arm)
	}
	std := ImageSearchPathFor(manifest.ImageStandard, "amd64")
	i, j = slices.Index(std, filepath.Join(root, manifest.KernelSourceDir, "standard", "amd64")), slices.Index(std, filepath.Join(root, "standard", "amd64"))
	if j < 0 || sourceKernelFirst(runtime.GOOS, "amd64") != (i >= 0 && i < j) {
		t.Errorf("standard search path %v on %s", std, runtime.GOOS)
	}
}

func TestImageDirUnder(t *testing.T) {
	root := t.TempDir()
	deb := filepath.Join(root, "amd64")
	src := filepath.Join(root, manifest.KernelSourceDir, "amd64")
	// Nothing built: the portable form, whose absence the caller reports.
	if got := ImageDirUnder(root, manifest.ImageMinimal, "amd64"); got != deb {
		t.Errorf("no image: ImageDirUnder = %s, want %s", got, deb)
	}
	for _, d := range []string{deb, src} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Folders without a manifest do not count.
	if got := ImageDirUnder(root, manifest.ImageMinimal, "amd64"); got != deb {
		t.Errorf("empty folders: ImageDirUnder = %s, want %s", got, deb)
	}
	if err := os.WriteFile(filepath.Join(src, manifest.FileName), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	want := deb
	if sourceKernelFirst(runtime.GOOS, "amd64") {
		want = src
	}
	if got := ImageDirUnder(root, manifest.ImageMinimal, "amd64"); got != want {
		t.Errorf("ImageDirUnder = %s, want %s on %s", got, want, runtime.GOOS)
	}
	if got := ImageDirUnder(root, manifest.ImageStandard, "amd64"); got != filepath.Join(root, "standard", "amd64") {
		t.Errorf("standard, none built: ImageDirUnder = %s", got)
	}
}
