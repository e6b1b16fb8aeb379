package desktop

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/app/session"
)

// TestAgentsUseTheHelper: the window connects agents to the airlock command
// that comes with the app, and says why it cannot when there is none.
func TestAgentsUseTheHelper(t *testing.T) {
	core := newFakeCore(session.StateRunning, "/home/u/reports")
	// The test binary has no airlock beside it.
	w := get(t, Handler(core, nil, testUI, true, nil, agentsAPI("linux")), "/v1/agents")
	if w.Code == 200 || !strings.Contains(w.Body.String(), "the Airlock helper (the airlock command) is missing") {
		t.Fatalf("%d %s", w.Code, w.Body)
	}

	// With one beside the app, the entry runs it.
	dir := t.TempDir()
	app := filepath.Join(dir, "airlock-desktop")
	helper := filepath.Join(dir, "airlock")
	for _, p := range []string{app, helper} {
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	got, err := FindHelper(app, "linux")
	if err != nil || got != helper {
		t.Fatalf("%s %v", got, err)
	}
	t.Setenv("HOME", t.TempDir())
	w = get(t, Handler(core, nil, testUI, true, nil, agentsAPIFor(app, "linux")), "/v1/agents")
	if w.Code != 200 || !strings.Contains(w.Body.String(), `"name":"claude-desktop"`) {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
}
