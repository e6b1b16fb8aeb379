package agents

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"
	"github.com/tailscale/hujson"
)

var update = os.Getenv("UPDATE_GOLDEN") != ""

var testEntry = Entry{Command: `/opt/Air "lock"/bin/airlock`, Args: []string{"mcp"}}

// golden compares got with testdata/name; UPDATE_GOLDEN=1 rewrites it.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	p := filepath.Join("testdata", name)
	if update {
		if err := os.WriteFile(p, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (UPDATE_GOLDEN=1 creates it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s:\n%s\nwant (UPDATE_GOLDEN=1 rewrites):\n%s", name, got, want)
	}
}

func mustAgent(t *testing.T, name string) Agent {
	t.Helper()
	a, err := Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// decode reads a's file format into plain Go values.
func decode(t *testing.T, a Agent, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	var err error
	switch a.format {
	case formatTOML:
		err = toml.Unmarshal(b, &m)
	case formatJSONC:
		b, err = hujson.Standardize(b)
		if err == nil {
			err = json.Unmarshal(b, &m)
		}
	default:
		err = json.Unmarshal(b, &m) // the agent's own strict parser
	}
	if err != nil {
		t.Fatalf("%s does not parse: %v\n%s", a.Name, err, b)
	}
	return m
}

// withoutEntry is m without servers.airlock (and without an empty servers
// that only the entry's adding made).
func withoutEntry(a Agent, m map[string]any) map[string]any {
	if s, ok := m[a.container].(map[string]any); ok {
		delete(s, ServerName)
	}
	return m
}

func TestEditGolden(t *testing.T) {
	for _, tc := range []struct {
		in, agent string
		roundTrip bool // disconnect(connect(in)) == in
	}{
		{"claude-desktop.json", "claude-desktop", true},
		{"claude-desktop-noservers.json", "claude-desktop", false},
		{"claude-code.json", "claude-code", true},
		{"claude-code-stale.json", "claude-code", false},
		{"cursor.json", "cursor", true},
		{"cursor-empty-servers.json", "cursor", false},
		{"vscode.jsonc", "vscode", false},
		{"vscode-nocomma.jsonc", "vscode", true},
		{"codex.toml", "codex", true},
		{"codex-stale.toml", "codex", false},
		{"codex-noeol.toml", "codex", false},
	} {
		t.Run(tc.in, func(t *testing.T) {
			a := mustAgent(t, tc.agent)
			in, err := os.ReadFile(filepath.Join("testdata", tc.in+".in"))
			if err != nil {
				t.Fatal(err)
			}
			added, err := a.edit(in, testEntry, false)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, tc.in+".connect", added)
			if again, err := a.edit(added, testEntry, false); err != nil || !bytes.Equal(again, added) {
				t.Fatalf("connecting twice changed the file (%v):\n%s", err, again)
			}
			removed, err := a.edit(added, Entry{}, true)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, tc.in+".disconnect", removed)
			if again, err := a.edit(removed, Entry{}, true); err != nil || !bytes.Equal(again, removed) {
				t.Fatalf("disconnecting twice changed the file (%v):\n%s", err, again)
			}
			if tc.roundTrip && !bytes.Equal(removed, in) {
				t.Fatalf("connect then disconnect is not the file as it was:\n%s", removed)
			}

			// The agent reads what was written: the entry, and everything
			// else as it was.
			before, after := decode(t, a, in), decode(t, a, added)
			servers, _ := after[a.container].(map[string]any)
			entry, _ := servers[ServerName].(map[string]any)
			if entry["command"] != testEntry.Command || !reflect.DeepEqual(entry["args"], []any{"mcp"}) {
				t.Fatalf("entry %v", entry)
			}
			oldServers, _ := before[a.container].(map[string]any)
			if old, ok := oldServers[ServerName].(map[string]any); ok {
				for k, v := range old {
					if k != "command" && k != "args" && !reflect.DeepEqual(entry[k], v) {
						t.Fatalf("the entry's own %s changed: %v, was %v", k, entry[k], v)
					}
				}
			}
			if !reflect.DeepEqual(withoutEntry(a, after), withoutEntry(a, before)) && before[a.container] != nil {
				t.Fatalf("other settings changed:\n%v\nwas\n%v", after, before)
			}
			gone := decode(t, a, removed)
			if s, ok := gone[a.container].(map[string]any); ok && s[ServerName] != nil {
				t.Fatalf("disconnect left the entry: %v", gone)
			}
		})
	}
}

func TestEditEmptyFile(t *testing.T) {
	for _, a := range All() {
		for _, in := range []string{"", "\n  \n"} {
			out, err := a.edit([]byte(in), testEntry, false)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out, Print(a, testEntry)) {
				t.Fatalf("%s: an empty file gives\n%s\nnot what --print shows\n%s", a.Name, out, Print(a, testEntry))
			}
			m := decode(t, a, out)
			if m[a.container].(map[string]any)[ServerName] == nil {
				t.Fatalf("%s: %s", a.Name, out)
			}
			if rm, err := a.edit([]byte(in), Entry{}, true); err != nil || string(rm) != in {
				t.Fatalf("%s: removing from an empty file: %q %v", a.Name, rm, err)
			}
		}
		golden(t, "print-"+a.Name, Print(a, testEntry))
	}
}

func TestEditRefuses(t *testing.T) {
	for _, tc := range []struct {
		agent, in, want string
	}{
		{"claude-desktop", "{\n  \"mcpServers\": {\n    \"x\": {}\n  },,\n}\n", "line 4"},
		{"claude-desktop", "{\n  // a comment\n  \"mcpServers\": {}\n}", "line 2"},
		{"cursor", "[1, 2]", "not a JSON object"},
		{"cursor", `{"mcpServers": [1]}`, "not a JSON object"},
		{"vscode", "{\n\t\"servers\": {\n\t\t\"a\": \n\t}\n}", "line 4"},
		{"codex", "model = \"x\"\n[mcp_servers.airlock\ncommand = 1\n", "line 2"},
		{"codex", "mcp_servers.airlock.command = \"x\"\n", "line 1"},
		{"codex", "[mcp_servers]\nairlock = { command = \"x\" }\n", "line 2"},
		{"codex", "a = 1\nmcp_servers = { other = { command = \"x\" } }\n", "line 2"},
		{"codex", "[[mcp_servers.airlock]]\ncommand = \"x\"\n", "line 1"},
	} {
		a := mustAgent(t, tc.agent)
		_, err := a.edit([]byte(tc.in), testEntry, false)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %q: %v, want an error naming %q", tc.agent, tc.in, err, tc.want)
		}
	}
}

// fakeHost is a machine with an empty home, nothing on PATH, and agents
// made present by creating their folders.
func fakeHost(t *testing.T) Host {
	home := t.TempDir()
	return Host{GOOS: "linux", Home: home, Getenv: func(string) string { return "" },
		LookPath: func(string) (string, error) { return "", errors.New("not found") }}
}

func TestConnectFile(t *testing.T) {
	h := fakeHost(t)
	a := mustAgent(t, "cursor")
	path := filepath.Join(h.Home, ".cursor", "mcp.json")

	if _, err := h.Connect(a, testEntry); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "--print cursor") {
		t.Fatalf("connecting an agent that is not here: %v", err)
	}
	if st := h.Status(a, testEntry); st.Found || st.Connected || st.Path != path {
		t.Fatalf("status %+v", st)
	}
	if err := os.Mkdir(filepath.Join(h.Home, ".cursor"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A new file: created 0600, no backup.
	res, err := h.Connect(a, testEntry)
	if err != nil || !res.Changed || res.Backup != "" || res.Path != path {
		t.Fatalf("%+v %v", res, err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("%v %v", fi, err)
	}
	if st := h.Status(a, testEntry); !st.Found || !st.Connected || st.Other {
		t.Fatalf("status %+v", st)
	}
	other := testEntry
	other.Command = "/elsewhere/airlock"
	if st := h.Status(a, other); st.Connected || !st.Other {
		t.Fatalf("status for another airlock %+v", st)
	}

	// An existing file: its mode kept, one backup of the original, and a
	// second connect writes nothing.
	orig := []byte("{\n  \"mcpServers\": {\n    \"x\": {\"command\": \"x\"}\n  }\n}\n")
	if err := os.WriteFile(path, orig, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o640); err != nil {
		t.Fatal(err)
	}
	res, err = h.Connect(a, testEntry)
	if err != nil || !res.Changed || res.Backup != path+BackupSuffix {
		t.Fatalf("%+v %v", res, err)
	}
	if b, _ := os.ReadFile(res.Backup); !bytes.Equal(b, orig) {
		t.Fatalf("backup %q", b)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o640 {
		t.Fatalf("mode %v, want 0640 kept", fi.Mode())
	}
	fi1, _ := os.Stat(path)
	res, err = h.Connect(a, testEntry)
	if err != nil || res.Changed || res.Backup != "" {
		t.Fatalf("second connect: %+v %v", res, err)
	}
	if fi2, _ := os.Stat(path); !os.SameFile(fi1, fi2) || !fi2.ModTime().Equal(fi1.ModTime()) {
		t.Fatal("second connect rewrote the file")
	}
	// Disconnect changes the file but keeps the first backup.
	res, err = h.Disconnect(a)
	if err != nil || !res.Changed || res.Backup != "" {
		t.Fatalf("disconnect: %+v %v", res, err)
	}
	if b, _ := os.ReadFile(path); !bytes.Equal(b, orig) {
		t.Fatalf("after disconnect:\n%s", b)
	}
	if b, _ := os.ReadFile(path + BackupSuffix); !bytes.Equal(b, orig) {
		t.Fatalf("backup rewritten: %q", b)
	}
	if res, err := h.Disconnect(a); err != nil || res.Changed {
		t.Fatalf("second disconnect: %+v %v", res, err)
	}

	// A broken file is left as it is, with its name and line.
	broken := []byte("{\n  \"mcpServers\": {\n    \"x\": \n}\n")
	if err := os.WriteFile(path, broken, 0o640); err != nil {
		t.Fatal(err)
	}
	_, err = h.Connect(a, testEntry)
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "line 4") {
		t.Fatalf("broken file: %v", err)
	}
	if b, _ := os.ReadFile(path); !bytes.Equal(b, broken) {
		t.Fatal("broken file changed")
	}
	if st := h.Status(a, testEntry); st.Error == "" || st.Connected {
		t.Fatalf("status of a broken file %+v", st)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 2 {
		t.Fatalf("files left beside it: %v", entries)
	}
}

func TestConnectThroughSymlink(t *testing.T) {
	h := fakeHost(t)
	a := mustAgent(t, "claude-code")
	real := filepath.Join(h.Home, "dotfiles", "claude.json")
	if err := os.MkdirAll(filepath.Dir(real), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(real, []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(h.Home, ".claude.json")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Connect(a, testEntry); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the link was replaced: %v %v", fi, err)
	}
	if b, _ := os.ReadFile(real); !bytes.Contains(b, []byte(`"airlock"`)) {
		t.Fatalf("the link's target was not edited:\n%s", b)
	}
}

func TestPaths(t *testing.T) {
	env := map[string]string{}
	h := Host{Home: "/h", Getenv: func(k string) string { return env[k] }}
	for _, tc := range []struct {
		goos, agent, want string
		env               map[string]string
	}{
		{"darwin", "claude-desktop", "/h/Library/Application Support/Claude/claude_desktop_config.json", nil},
		{"windows", "claude-desktop", "/appdata/Claude/claude_desktop_config.json", map[string]string{"APPDATA": "/appdata"}},
		{"windows", "claude-desktop", "/h/AppData/Roaming/Claude/claude_desktop_config.json", nil},
		{"linux", "claude-desktop", "/h/.config/Claude/claude_desktop_config.json", nil},
		{"linux", "claude-desktop", "/xdg/Claude/claude_desktop_config.json", map[string]string{"XDG_CONFIG_HOME": "/xdg"}},
		{"linux", "claude-desktop", "/h/.config/Claude/claude_desktop_config.json", map[string]string{"XDG_CONFIG_HOME": "relative"}},
		{"darwin", "claude-code", "/h/.claude.json", nil},
		{"linux", "claude-code", "/c/.claude.json", map[string]string{"CLAUDE_CONFIG_DIR": "/c"}},
		{"windows", "codex", "/h/.codex/config.toml", nil},
		{"linux", "codex", "/ch/config.toml", map[string]string{"CODEX_HOME": "/ch"}},
		{"windows", "cursor", "/h/.cursor/mcp.json", nil},
		{"darwin", "vscode", "/h/Library/Application Support/Code/User/mcp.json", nil},
		{"windows", "vscode", "/appdata/Code/User/mcp.json", map[string]string{"APPDATA": "/appdata"}},
		{"linux", "vscode", "/h/.config/Code/User/mcp.json", nil},
	} {
		env = tc.env
		h.GOOS = tc.goos
		if got := h.Path(mustAgent(t, tc.agent)); got != filepath.FromSlash(tc.want) {
			t.Errorf("%s %s %v: %s, want %s", tc.goos, tc.agent, tc.env, got, tc.want)
		}
	}
	if _, err := Lookup("emacs"); !errors.Is(err, ErrUnknown) || !strings.Contains(err.Error(), "claude-desktop, claude-code, codex, cursor, vscode") {
		t.Fatal(err)
	}
}

// TestRemoveLeavesOtherForms: disconnect changes nothing in a file whose
// servers are written in a form connect refuses but that holds no entry of
// Airlock's.
func TestRemoveLeavesOtherForms(t *testing.T) {
	for _, tc := range []struct{ agent, in string }{
		{"codex", "a = 1\nmcp_servers = { other = { command = \"x\" } }\n"},
		{"codex", "[mcp_servers.other]\ncommand = \"x\"\n"},
		{"cursor", "// mine\n{\"mcpServers\": {\"x\": {}},}\n"},
		{"claude-code", "{\"mcpServers\": 3}"},
	} {
		out, err := mustAgent(t, tc.agent).edit([]byte(tc.in), Entry{}, true)
		if err != nil || string(out) != tc.in {
			t.Errorf("%s %q: %q %v", tc.agent, tc.in, out, err)
		}
	}
}
