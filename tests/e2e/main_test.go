//go:build e2e

// Package e2e boots the real guest image in QEMU and proves what `airlock
// run` promises: the scenarios run against the shared VM through the host
// packages, and against fresh VMs through the real CLI binary.
package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/app/egress"
	"github.com/airlock-sandbox/airlock/app/sandbox"
	"github.com/airlock-sandbox/airlock/guest/client"
	"github.com/airlock-sandbox/airlock/tests/internal/vmharness"
)

var (
	airlockBin string        // the CLI under test
	imageRoot  string        // images/out
	image      sandbox.Image // the verified image the shared VM boots
	shared     *sandbox.Sandbox
	sharedWS   string       // the shared VM's workspace on the host
	sharedGate *egress.Gate // the shared VM's egress gate (policy: sharedPolicy)
)

// sharedPolicy is the shared VM's egress policy; egress_test.go attacks it.
var sharedPolicy = egress.Config{
	Allow:    []string{"localhost", "*.corp.test", "ports.test:1", "files.test", "example.com"},
	Deny:     []string{"secret.corp.test", "files.test:9"},
	MapHosts: []string{"files.test=127.0.0.1", "example.com=127.0.0.1"},
}

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	env, err := vmharness.FromEnv("e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	airlockBin, imageRoot, image = env.Bin, env.ImageRoot, env.Image
	ws, err := os.MkdirTemp("", "airlock-e2e-ws-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(ws)
	sharedWS = vmharness.OwnedByTaskUser(ws)
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
	defer removeConsoles()
	console := consoleLog("shared")
	shared, err = vmharness.Boot(ctx, env.Image, sandbox.Options{
		Workspace: sharedWS, MemoryMiB: 1024, Egress: sharedGate, Logger: vmharness.Logger(slog.LevelInfo),
		ConsoleLog: console,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: boot the shared VM:", err)
		reportBootFailure("the shared VM", console)
		return 1
	}
	fmt.Fprintf(os.Stderr, "e2e: shared VM ready in %s (%+v)\n", time.Since(began).Round(time.Millisecond), shared.Machine().Info())
	code := m.Run()
	if err := closeStandardVM(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: close the standard VM:", err)
		code = 1
	}
	if err := vmharness.Close(shared); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: close the shared VM:", err)
		code = 1
	}
	return code
}

// Shorthands for the shared harness.
var (
	ownedByTaskUser = vmharness.OwnedByTaskUser
	newWorkspace    = func(t *testing.T) string { t.Helper(); return vmharness.NewWorkspace(t) }
	leftovers       = vmharness.Leftovers
	shell           = vmharness.Shell
)

type result = vmharness.Result

// sh runs a command on the shared VM and returns what it printed.
func sh(t *testing.T, spec client.Spec, stdin io.Reader) result {
	t.Helper()
	return vmharness.Exec(t, shared, spec, stdin)
}

// probe builds the probe program into the shared workspace once and
// returns its guest path.
func probe(t *testing.T) string {
	t.Helper()
	if err := vmharness.BuildProbe(filepath.Join(sharedWS, "probe")); err != nil {
		t.Fatal(err)
	}
	return "/workspace/probe"
}
