package vz

import (
	"path/filepath"
	"strings"
)

// BundleImageDir is where the guest image for arch lives inside the macOS
// app bundle that holds the executable exe:
// Airlock.app/Contents/Resources/images/<arch>. ok is false when exe is not
// in a bundle's Contents/MacOS folder (a CLI in bin/, a test binary). The
// caller resolves symlinks first (os.Executable, filepath.EvalSymlinks);
// this function only looks at the path, so it is tested on any OS.
func BundleImageDir(exe, arch string) (dir string, ok bool) {
	res, ok := BundleResources(exe)
	if !ok {
		return "", false
	}
	return filepath.Join(res, "images", arch), true
}

// BundleResources is the Contents/Resources folder of the app bundle whose
// Contents/MacOS folder holds exe, and ok is false when there is none.
func BundleResources(exe string) (dir string, ok bool) {
	if !filepath.IsAbs(exe) {
		return "", false
	}
	macos := filepath.Dir(filepath.Clean(exe))
	contents := filepath.Dir(macos)
	app := filepath.Dir(contents)
	// The Mac's default file system ignores case, so Contents/macos finds
	// the same folder; compare the way it does.
	if !strings.EqualFold(filepath.Base(macos), "MacOS") ||
		!strings.EqualFold(filepath.Base(contents), "Contents") ||
		!strings.EqualFold(filepath.Ext(app), ".app") || len(filepath.Base(app)) <= len(".app") {
		return "", false
	}
	return filepath.Join(contents, "Resources"), true
}
