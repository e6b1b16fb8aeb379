//go:build e2e

package e2e

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestUninstallPurgeStopsService: airlock uninstall --purge --yes stops a
// running service (airlock serve) before it removes the folders Airlock
// keeps, and leaves the user's workspace alone.
func TestUninstallPurgeStopsService(t *testing.T) {
	home := t.TempDir()
	ws := filepath.Join(home, "project")
	os.MkdirAll(ws, 0o755)
	os.WriteFile(filepath.Join(ws, "notes.txt"), []byte("mine\n"), 0o644)
	env := append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"),
		"XDG_STATE_HOME="+filepath.Join(home, ".local", "state"), "XDG_CACHE_HOME="+filepath.Join(home, ".cache"),
		"XDG_RUNTIME_DIR="+filepath.Join(home, "run"), "AIRLOCK_IMAGE_DIR="+imageRoot)
	serve := exec.Command(airlockBin, "serve", "--no-boot")
	serve.Env = env
	var serveErr bytes.Buffer
	serve.Stderr = &serveErr
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- serve.Wait() }()
	t.Cleanup(func() { serve.Process.Kill() })
	sock := filepath.Join(home, "run", "airlock", "airlock.sock")
	for deadline := time.Now().Add(30 * time.Second); !exists(sock); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no service socket: %s", serveErr.String())
		}
	}
	cmd := exec.Command(airlockBin, "uninstall", "--purge", "--yes")
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "stopped the Airlock service") {
		t.Fatalf("uninstall --purge --yes: %v\n%s", err, out)
	}
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatal("airlock serve still runs")
	}
	for _, d := range []string{".config/airlock", ".local/state/airlock", ".cache/airlock", "run/airlock"} {
		if exists(filepath.Join(home, d)) {
			t.Errorf("%s is still there:\n%s", d, out)
		}
	}
	if b, err := os.ReadFile(filepath.Join(ws, "notes.txt")); err != nil || string(b) != "mine\n" {
		t.Fatalf("the workspace was touched: %q %v", b, err)
	}
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }
