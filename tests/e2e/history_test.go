//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/app/egress"
	"github.com/airlock-sandbox/airlock/app/tasks"
)

// TestHistorySurvivesRestart: the egress decisions the UI's activity shows
// (/v1/egress/log) are still there after `airlock serve` restarts, and the
// numbering goes on after them; and `airlock cancel` makes the `airlock
// run` waiting on that task say it was cancelled, exiting 128+SIGTERM.
func TestHistorySurvivesRestart(t *testing.T) {
	root := t.TempDir()
	s := startServe(t, root)
	defer func() { s.stop() }()
	ctx := context.Background()

	// A waiting run, cancelled from another command.
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
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "started\n" {
		t.Fatalf("the task did not start: %q %v; stderr %s; serve %s", line, err, errOut.String(), s.stderr.String())
	}
	ts, err := s.client.Tasks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var id string
	for _, tk := range ts {
		if tk.State == tasks.Running {
			id = tk.ID
		}
	}
	if code, o, e := s.cli("", "cancel", id); code != 0 {
		t.Fatalf("airlock cancel %s: %d %q %q", id, code, o, e)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("airlock run still waits after its task was cancelled; stderr %s", errOut.String())
	}
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 143 ||
		errOut.String() != "airlock: task "+id+" was cancelled (airlock cancel)\n" {
		t.Errorf("cancelled run: %v, stderr %q; want exit 143 and the task named cancelled", err, errOut.String())
	}

	// A refusal recorded, then the service restarted.
	find := func(host string) egress.Decision {
		t.Helper()
		for range 100 {
			ds, err := s.client.EgressLog(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range ds {
				if d.Host == host {
					return d
				}
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Fatalf("no decision for %s in the egress log", host)
		return egress.Decision{}
	}
	s.cli("", "run", "--", "sh", "-c", "wget -q -O- http://before-restart.test/; true")
	before := find("before-restart.test")
	s.stop()
	s = startServe(t, root)
	if d := find("before-restart.test"); d.Seq != before.Seq || d.Action != egress.ActionDeny {
		t.Errorf("after a restart the decision is %+v, want %+v", d, before)
	}
	s.cli("", "run", "--", "sh", "-c", "wget -q -O- http://after-restart.test/; true")
	if after := find("after-restart.test"); after.Seq <= before.Seq {
		t.Errorf("numbering started over after a restart: seq %d after %d", after.Seq, before.Seq)
	}
	if code, o, _ := s.cli("", "egress", "log"); code != 0 || !strings.Contains(o, "before-restart.test") {
		t.Errorf("airlock egress log after a restart: %d %q", code, o)
	}
}
