//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/app/sandbox"
	"github.com/airlock-sandbox/airlock/guest/client"
	"github.com/airlock-sandbox/airlock/images/manifest"
	"github.com/airlock-sandbox/airlock/tests/internal/vmharness"
)

// TestArm64StandardImage boots the arm64 standard image (what Apple
// Silicon Macs boot with vz) under qemu-system-aarch64 and runs the
// guest's own Python and git from the Debian root disk. The image is built
// under binfmt emulation on an amd64 host; make test builds it and sets
// AIRLOCK_REQUIRE_ARM64_STANDARD=1, so there it must not be missing.
func TestArm64StandardImage(t *testing.T) {
	dir := filepath.Join(imageRoot, manifest.ImageStandard, "arm64")
	if _, err := os.Stat(filepath.Join(dir, manifest.FileName)); errors.Is(err, fs.ErrNotExist) && os.Getenv("AIRLOCK_REQUIRE_ARM64_STANDARD") == "" {
		t.Skipf("no arm64 standard image in %s: build it with go run ./images/cmd/airlock-image -arch arm64 -image standard (needs qemu-user-static, see images/README.md); set AIRLOCK_REQUIRE_ARM64_STANDARD=1 to fail instead", dir)
	}
	img, err := sandbox.LoadImage(dir)
	if err != nil {
		t.Fatal(err)
	}
	if img.RootDisk == "" {
		t.Fatalf("%s is not the standard image: no root disk", dir)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	ws := newWorkspace(t)
	sb := bootArm64(t, ctx, img, ws, 1024, 5*time.Minute)

	began := time.Now()
	var out, errOut bytes.Buffer
	exit, err := sb.Agent().Exec(ctx, client.Spec{Argv: []string{"bash", "-c", `set -e
python3 -c 'import platform; print(platform.machine())'
git --version
awk '$2=="/" {print "rootfs="$3}' /proc/mounts
. /etc/os-release; echo "os=$ID-$VERSION_CODENAME"
id -u > /workspace/uid`}}, client.Stdio{Stdout: &out, Stderr: &errOut})
	if err != nil || exit.Code != 0 {
		t.Fatalf("arm64 standard task: %+v %v\nstdout: %s\nstderr: %s", exit, err, out.String(), errOut.String())
	}
	t.Logf("task took %s:\n%s", time.Since(began).Round(time.Millisecond), out.String())
	lines := strings.Split(out.String(), "\n")
	if len(lines) < 4 || lines[0] != "aarch64" || !strings.HasPrefix(lines[1], "git version ") ||
		lines[2] != "rootfs=overlay" || lines[3] != "os=debian-bookworm" {
		t.Fatalf("arm64 standard task printed %q", out.String())
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "uid")); strings.TrimSpace(string(b)) != fmt.Sprint(vmharness.UserUID()) {
		t.Fatalf("the task did not write the workspace as uid %d: %q", vmharness.UserUID(), b)
	}
}
