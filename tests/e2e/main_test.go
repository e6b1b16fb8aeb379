//go:build e2e

// Package e2e boots the real guest image in QEMU and proves what `airlock
// run` promises: the scenarios run against the shared VM through the host
// packages, and against fresh VMs through the real CLI binary.
package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/app/egress"
	"github.com/airlock-sandbox/airlock/app/sandbox"
	"github.com/airlock-sandbox/airlock/app/workspace"
)

var (
	airlockBin string // the CLI under test
	imageRoot  string // images/out
	shared     *sandbox.Sandbox
	sharedWS   string       // the shared VM's workspace on the host
	sharedGate *egress.Gate // the shared VM's egress gate (policy: sharedPolicy)
)

// sharedPolicy is the shared VM's egress policy; egress_test.go attacks it.
var sharedPolicy = egress.Config{
	Allow:    []string{"localhost", "*.corp.test", "ports.test:1"},
	Deny:     []string{"secret.corp.test", "files.test:9"},
	MapHosts: []string{"files.test=127.0.0.1", "example.com=127.0.0.1"},
}

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	airlockBin = os.Getenv("AIRLOCK_E2E_BIN")
	imageRoot = os.Getenv("AIRLOCK_IMAGE_DIR")
	if airlockBin == "" || imageRoot == "" {
		fmt.Fprintln(os.Stderr, "e2e: set AIRLOCK_E2E_BIN and AIRLOCK_IMAGE_DIR (make test-e2e does)")
		return 1
	}
	ws, err := os.MkdirTemp("", "airlock-e2e-ws-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(ws)
	sharedWS = ownedByTaskUser(ws)
	img, err := sandbox.LoadImage(filepath.Join(imageRoot, runtime.GOARCH))
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	uid, gid := workspace.Owner(sharedWS)
	policy := sharedPolicy
	policy.LogFile = filepath.Join(ws, "..", filepath.Base(ws)+"-egress.jsonl")
	defer os.Remove(policy.LogFile)
	if sharedGate, err = egress.New(policy); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: egress gate:", err)
		return 1
	}
	defer sharedGate.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	began := time.Now()
	shared, err = sandbox.Start(ctx, sandbox.Options{
		Workspace: sharedWS, Image: img, UID: uid, GID: gid, MemoryMiB: 1024, Egress: sharedGate,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: boot the shared VM:", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "e2e: shared VM ready in %s (%+v)\n", time.Since(began).Round(time.Millisecond), shared.Machine().Info())
	code := m.Run()
	if err := closeStandardVM(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: close the standard VM:", err)
		code = 1
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer ccancel()
	if err := shared.Close(cctx); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: close the shared VM:", err)
		code = 1
	}
	return code
}

// ownedByTaskUser makes dir belong to uid 1000 when the tests run as root,
// as a user's own folder would; the guest's task user then gets that uid.
func ownedByTaskUser(dir string) string {
	if os.Getuid() == 0 {
		_ = os.Chown(dir, 1000, 1000)
	}
	canon, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return dir
	}
	return canon
}

// newWorkspace returns a fresh workspace folder owned like a user's folder.
func newWorkspace(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	return ownedByTaskUser(dir)
}

// leftovers lists processes whose command line mentions s (QEMU and
// virtiofsd name the console log and the workspace in theirs).
func leftovers(s string) string {
	out, _ := exec.Command("pgrep", "-af", s).Output()
	return string(out)
}
