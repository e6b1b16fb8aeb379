//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/app/service"
)

// TestRefusalsSayHowToFixThem runs tasks through `airlock serve` the way a
// user does: a refused host is named on the task's stderr and in the
// gate's answer with `airlock egress allow` (not `airlock run --allow`,
// which would boot another VM); a question waiting in the window is said
// with the time left, and released when the window closes; a secret whose
// value lived in the memory of a service that stopped refuses the task,
// through the service and through a run of its own, with one message
// saying how to set it again.
func TestRefusalsSayHowToFixThem(t *testing.T) {
	root, err := os.MkdirTemp("", "airlock-refusal-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(root)
	ws := filepath.Join(root, "ws")
	os.Mkdir(ws, 0o755)
	build := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(ws, "credprobe"), "./testdata/credprobe")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build credprobe: %v\n%s", err, out)
	}
	filepath.WalkDir(ws, func(p string, _ os.DirEntry, _ error) error { ownedByTaskUser(p); return nil })
	// A secret no task here asks for, whose value is not available either.
	os.MkdirAll(filepath.Join(root, "config", "airlock"), 0o700)
	os.WriteFile(filepath.Join(root, "config", "airlock", "settings.json"), []byte(`{"secrets": [{"name": "OTHER_TOKEN",
		"hosts": ["other.test"], "source": "env:E2E_NEVER_SET", "placeholder": "airlock_ph_other_token_0123456789abcdef"}]}`), 0o600)

	s := startServe(t, root)
	defer func() { s.stop() }()
	if code, out, errOut := s.cli("", "workspace", "set", ws); code != 0 {
		t.Fatalf("workspace set: %d %q %q", code, out, errOut)
	}

	// No window is open: nobody is asked, and the fix is this service's.
	code, out, errOut := s.cli("", "run", "--", "/workspace/credprobe", "echo", "http://blocked.test/")
	if code != 0 || !strings.Contains(out, "403") || !strings.Contains(out, "denied (no window to ask)") ||
		!strings.Contains(out, "airlock egress allow blocked.test") || strings.Contains(out, "airlock run") {
		t.Fatalf("the gate's answer: exit %d\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(errOut, "airlock: egress: refused blocked.test:80 (no-matching-rule); allow it with airlock egress allow blocked.test\n") {
		t.Fatalf("stderr does not name the refusal and its fix:\n%s", errOut)
	}

	// A window is open: the question waits, the CLI says so, and closing
	// the window releases it.
	window, closeWindow := context.WithCancel(context.Background())
	defer closeWindow()
	if _, err := s.client.Events(window, true); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(airlockBin, "run", "--", "/workspace/credprobe", "echo", "http://asked.test/")
	cmd.Env = s.env
	var asked, askedErr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &asked, &askedErr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	for i := 0; ; i++ {
		as, _ := s.client.Asks(context.Background())
		if len(as) == 1 && as[0].Host == "asked.test" {
			break
		}
		if i > 600 {
			cmd.Process.Kill()
			t.Fatalf("no question asked: %s", askedErr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	closed := time.Now()
	closeWindow()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit: %v\n%s", err, askedErr.String())
		}
	case <-time.After(service.AskTimeout - 10*time.Second):
		cmd.Process.Kill()
		t.Fatalf("the question was not released when the window closed:\n%s", askedErr.String())
	}
	if !strings.Contains(askedErr.String(), "airlock: egress: asked.test:80 waits for an answer in the Airlock window (") ||
		!strings.Contains(askedErr.String(), "s left)") || !strings.Contains(asked.String(), "denied (no window to ask)") {
		t.Fatalf("after %s: stdout:\n%s\nstderr:\n%s", time.Since(closed), asked.String(), askedErr.String())
	}

	// A value kept only in memory is gone once the service restarts.
	code, _, errOut = s.cli("v\n", "secret", "set", "MEM_TOKEN", "--host", "api.test")
	if code != 0 {
		t.Fatalf("secret set: %d %s", code, errOut)
	}
	if !strings.Contains(errOut, "memory") {
		t.Skip("an OS keychain keeps the value here: nothing is lost on restart")
	}
	s.stop()
	s = startServe(t, root)
	other := ownedByTaskUser(filepath.Join(root, "other"))
	os.Mkdir(other, 0o755)
	ownedByTaskUser(other)
	for name, args := range map[string][]string{
		"through the service": {"run", "--secret", "MEM_TOKEN", "--", "true"},
		"in a VM of its own":  {"run", "--workspace", other, "--secret", "MEM_TOKEN", "--", "true"},
	} {
		code, out, errOut := s.cli("", args...)
		if code != 125 || out != "" || strings.Count(errOut, "\n") != 1 || strings.Count(errOut, "MEM_TOKEN:") != 1 ||
			!strings.Contains(errOut, "airlock secret set MEM_TOKEN --host api.test") ||
			strings.Contains(errOut, "OTHER_TOKEN") || strings.Contains(errOut, "airlock_ph_") {
			t.Errorf("%s: exit %d %q\n%s", name, code, out, errOut)
		}
	}
}
