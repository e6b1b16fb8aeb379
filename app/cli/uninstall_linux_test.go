package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/app/service"
)

// purgeHome makes a user with files in every place Airlock keeps data,
// and a workspace of theirs in the settings.
func purgeHome(t *testing.T) (dirs []string, ws string) {
	t.Helper()
	root := t.TempDir()
	home := filepath.Join(root, "home")
	env := map[string]string{"HOME": home, "XDG_CONFIG_HOME": filepath.Join(home, ".config"),
		"XDG_STATE_HOME": filepath.Join(home, ".local", "state"), "XDG_CACHE_HOME": filepath.Join(home, ".cache"),
		"XDG_RUNTIME_DIR": filepath.Join(root, "run")}
	for k, v := range env {
		t.Setenv(k, v)
	}
	ws = filepath.Join(home, "project")
	dirs = []string{filepath.Join(env["XDG_CONFIG_HOME"], "airlock"), filepath.Join(env["XDG_STATE_HOME"], "airlock"),
		filepath.Join(env["XDG_CACHE_HOME"], "airlock"), filepath.Join(env["XDG_RUNTIME_DIR"], "airlock")}
	for _, d := range append(dirs, ws) {
		if err := os.MkdirAll(filepath.Join(d, "sub"), 0o700); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(d, "sub", "f"), []byte("x"), 0o600)
	}
	os.WriteFile(filepath.Join(dirs[0], "settings.json"), []byte(`{"workspace": "`+ws+`"}`), 0o600)
	return dirs, ws
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// TestUninstallPurge: airlock uninstall lists what it would remove;
// --purge asks first, refuses while the service runs tasks, and then
// removes every folder Airlock keeps, never the user's workspace.
func TestUninstallPurge(t *testing.T) {
	dirs, ws := purgeHome(t)
	all := func(want bool) {
		t.Helper()
		for _, d := range dirs {
			if exists(d) != want {
				t.Fatalf("%s exists: %v, want %v", d, !want, want)
			}
		}
		if !exists(filepath.Join(ws, "sub", "f")) {
			t.Fatal("the workspace was touched")
		}
	}
	code, out, errOut := cli("uninstall")
	if code != 0 || !strings.Contains(out, dirs[1]) || !strings.Contains(out, dirs[2]) || !strings.Contains(out, "--purge") {
		t.Fatalf("uninstall: %d %q %q", code, out, errOut)
	}
	all(true)

	var o, e bytes.Buffer
	code = Main([]string{"uninstall", "--purge"}, Stdio{In: strings.NewReader("n\n"), Out: &o, Err: &e})
	if code != ExitAirlockError || !strings.Contains(e.String(), "Remove all of these? [y/N]") || !strings.Contains(e.String(), "nothing removed") {
		t.Fatalf("declined: %d %q %q", code, o.String(), e.String())
	}
	all(true)

	sock, stop := serveCore(t, busyCore{})
	code, _, errOut = cli("uninstall", "--purge", "--yes", "--socket", sock)
	if code != ExitAirlockError || !strings.Contains(errOut, "1 task(s) are running (see airlock tasks)") {
		t.Fatalf("with a task running: %d %q", code, errOut)
	}
	all(true)
	stop()

	code, out, errOut = cli("uninstall", "--purge", "--yes")
	if code != 0 {
		t.Fatalf("purge: %d %q %q", code, out, errOut)
	}
	all(false)
}

// busyCore is a service running one task.
type busyCore struct{ service.Core }

func (busyCore) Status(context.Context) (service.Status, error) {
	return service.Status{RunningTasks: 1}, nil
}

// TestConnectJSON: connect and disconnect print, with --json, an array of
// what they did to each agent's file, like connect's listing.
func TestConnectJSON(t *testing.T) {
	purgeHome(t)
	os.MkdirAll(filepath.Join(os.Getenv("HOME"), ".claude"), 0o700)
	for _, args := range [][]string{{"connect"}, {"connect", "claude-code"}, {"disconnect", "claude-code"}} {
		code, out, errOut := cli(append(args, "--json")...)
		var v []map[string]any
		if code != 0 || json.Unmarshal([]byte(out), &v) != nil || len(v) == 0 {
			t.Fatalf("airlock %v --json: exit %d, %q %q; want a JSON array", args, code, out, errOut)
		}
		if args[0] != "connect" || len(args) > 1 {
			if v[0]["agent"] != "claude-code" || v[0]["changed"] != true {
				t.Errorf("airlock %v --json: %s", args, out)
			}
		}
	}
}
