//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/app/sandbox"
	"github.com/airlock-sandbox/airlock/app/workspace"
	"github.com/airlock-sandbox/airlock/guest/client"
	"github.com/airlock-sandbox/airlock/vm"
	"github.com/airlock-sandbox/airlock/vm/qemu"
)

// TestArm64Image boots the arm64 image (what Apple's framework will boot)
// under qemu-system-aarch64 and runs a task that uses the workspace.
func TestArm64Image(t *testing.T) {
	img, err := sandbox.LoadImage(filepath.Join(imageRoot, "arm64"))
	if err != nil {
		t.Fatal(err)
	}
	ws := newWorkspace(t)
	os.WriteFile(filepath.Join(ws, "hello.txt"), []byte("hi arm\n"), 0o644)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sb := bootArm64(t, ctx, img, ws, 768, 4*time.Minute)
	var out bytes.Buffer
	exit, err := sb.Agent().Exec(ctx, client.Spec{Argv: []string{"sh", "-c", "uname -m; cat /workspace/hello.txt; id -u > /workspace/uid"}},
		client.Stdio{Stdout: &out})
	if err != nil || exit.Code != 0 || out.String() != "aarch64\nhi arm\n" {
		t.Fatalf("arm64 task: %+v %v %q", exit, err, out.String())
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "uid")); len(b) == 0 {
		t.Fatalf("the arm64 guest could not write to the workspace")
	}
	// The first arm64 guest of this shape saved a template (or one before
	// it did): the next starts from it, on QEMU's virt machine.
	ws2 := newWorkspace(t)
	os.WriteFile(filepath.Join(ws2, "hello.txt"), []byte("hi again\n"), 0o644)
	sb2 := bootArm64(t, ctx, img, ws2, 768, 4*time.Minute)
	if !vm.Restored(sb2.Machine()) {
		t.Errorf("the second arm64 guest booted instead of starting from the first one's template")
	}
	out.Reset()
	if exit, err := sb2.Agent().Exec(ctx, client.Spec{Argv: []string{"cat", "/workspace/hello.txt"}}, client.Stdio{Stdout: &out}); err != nil || exit.Code != 0 || out.String() != "hi again\n" {
		t.Fatalf("arm64 task from a template: %+v %v %q", exit, err, out.String())
	}
}

// bootArm64 boots img under qemu-system-aarch64 with ws shared, owned as
// the folder is, and closes it when the test ends.
func bootArm64(t *testing.T, ctx context.Context, img sandbox.Image, ws string, memMiB int, bootTimeout time.Duration) *sandbox.Sandbox {
	t.Helper()
	uid, gid := workspace.Owner(ws)
	began := time.Now()
	sb, err := sandbox.Start(ctx, sandbox.Options{
		Workspace: ws, Image: img, UID: uid, GID: gid, MemoryMiB: memMiB, CPUs: 2,
		BootTimeout: bootTimeout,
		NewMachine: func(cfg vm.Config) (vm.Machine, error) {
			return qemu.New(cfg, qemu.Options{Arch: "arm64"})
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sb.Close(context.Background()) })
	t.Logf("arm64 guest ready in %s", time.Since(began).Round(time.Millisecond))
	return sb
}
