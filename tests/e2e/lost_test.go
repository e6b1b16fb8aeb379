//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestRunSaysTaskLostWhenServiceDies: an airlock run on the service's VM
// whose service is killed mid-task says the task is lost, not that no
// service runs.
func TestRunSaysTaskLostWhenServiceDies(t *testing.T) {
	s := startServe(t, t.TempDir())
	cmd := exec.Command(airlockBin, "run", "--", "sh", "-c", "echo started; sleep 120")
	cmd.Env = s.env
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "started\n" {
		t.Fatalf("the task did not start: %q %v; stderr %s; serve %s", line, err, errOut.String(), s.stderr.String())
	}
	s.cmd.Process.Kill()
	s.cmd.Wait()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("airlock run still waits after its service died; stderr %s", errOut.String())
	}
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 125 || !strings.Contains(errOut.String(), "is lost: the Airlock service stopped while it ran") ||
		strings.Contains(errOut.String(), "no Airlock service") {
		t.Fatalf("exit %v, stderr %q; want 125 and the task named lost", err, errOut.String())
	}
}
