//go:build e2e

package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// installedEnv is the environment of an installed airlock: no
// AIRLOCK_IMAGE_DIR, no service.
func installedEnv(t *testing.T) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AIRLOCK_IMAGE_DIR=") {
			env = append(env, kv)
		}
	}
	return append(env, "XDG_RUNTIME_DIR="+t.TempDir(), "AIRLOCK_TEMPLATES=off")
}

// runIn runs prog with args in a folder of its own (no images/out below
// it) and returns its combined output and error.
func runIn(t *testing.T, prog string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(prog, args...)
	cmd.Dir, cmd.Env = t.TempDir(), installedEnv(t)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestMakeInstall: make install puts airlock and the guest image under
// DESTDIR/PREFIX, where the installed binary (and a symlink to it) finds
// the image without AIRLOCK_IMAGE_DIR and runs a command; a copy of the
// binary elsewhere names AIRLOCK_IMAGE_DIR; make uninstall removes it all.
func TestMakeInstall(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	dest := t.TempDir()
	prefix := "/opt/airlock-test"
	makeArgs := []string{"-C", root, "DESTDIR=" + dest, "PREFIX=" + prefix, "AIRLOCK_BIN=" + airlockBin,
		"IMAGE_DIR=" + imageRoot, "INSTALL_IMAGES=minimal", "ARCH=" + runtime.GOARCH, "DESKTOP_BIN=/nonexistent"}
	if out, err := exec.Command("make", append([]string{"install"}, makeArgs...)...).CombinedOutput(); err != nil {
		t.Fatalf("make install: %v\n%s", err, out)
	}
	bin := filepath.Join(dest, prefix, "bin", "airlock")
	images := filepath.Join(dest, prefix, "share", "airlock", "images")

	out, err := runIn(t, bin, "version")
	if err != nil || !strings.Contains(out, "image minimal: kernel ") || !strings.Contains(out, "in "+images+"/") {
		t.Fatalf("installed airlock version: %v\n%s", err, out)
	}
	if !strings.HasPrefix(out, "airlock ") || strings.HasPrefix(out, "airlock dev") {
		t.Errorf("no release version:\n%s", out)
	}

	link := filepath.Join(t.TempDir(), "airlock")
	if err := os.Symlink(bin, link); err != nil {
		t.Fatal(err)
	}
	if out, err := runIn(t, link, "run", "--", "echo", "installed"); err != nil || out != "installed\n" {
		t.Fatalf("airlock run through a symlink to the installed binary: %v\n%s", err, out)
	}

	lone := filepath.Join(t.TempDir(), "airlock")
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lone, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := runIn(t, lone, "run", "--", "true"); err == nil || !strings.Contains(out, "AIRLOCK_IMAGE_DIR") {
		t.Fatalf("a copy away from its images: %v\n%s", err, out)
	}

	if out, err := exec.Command("make", append([]string{"uninstall"}, makeArgs...)...).CombinedOutput(); err != nil {
		t.Fatalf("make uninstall: %v\n%s", err, out)
	}
	for _, p := range []string{bin, filepath.Join(dest, prefix, "share", "airlock")} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s is still there after make uninstall (%v)", p, err)
		}
	}
}
