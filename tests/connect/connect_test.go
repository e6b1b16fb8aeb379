//go:build e2e

// Package connect runs the real airlock binary's connect and disconnect
// commands against a fresh HOME, without a VM: what a user types, and the
// agents' files as the agents would read them afterwards.
package connect

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"
)

type env struct {
	bin, home, config string
}

func setup(t *testing.T) env {
	t.Helper()
	bin := os.Getenv("AIRLOCK_E2E_BIN")
	if bin == "" {
		t.Fatal("AIRLOCK_E2E_BIN is not set: build the CLI (make airlock) and point it there")
	}
	home := t.TempDir()
	return env{bin: bin, home: home, config: filepath.Join(home, ".config")}
}

// airlock runs the CLI with only HOME and a PATH on which no agent is.
func (e env) airlock(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(e.bin, args...)
	cmd.Env = []string{"HOME=" + e.home, "PATH=/usr/bin:/bin", "XDG_RUNTIME_DIR=" + t.TempDir()}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return code, out.String(), errOut.String()
}

func TestConnectFreshHome(t *testing.T) {
	e := setup(t)
	bin, err := filepath.Abs(e.bin)
	if err != nil {
		t.Fatal(err)
	}

	// Nothing is on this machine: the list says so, and connect refuses.
	code, out, _ := e.airlock(t, "connect")
	if code != 0 || strings.Count(out, " no ") < 5 || !strings.Contains(out, filepath.Join(e.config, "Claude", "claude_desktop_config.json")) {
		t.Fatalf("list (%d):\n%s", code, out)
	}
	code, _, stderr := e.airlock(t, "connect", "claude-desktop")
	if code != 125 || !strings.Contains(stderr, "Claude Desktop was not found on this machine") || !strings.Contains(stderr, "--print claude-desktop") {
		t.Fatalf("connect without the agent (%d): %s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(e.config, "Claude")); err == nil {
		t.Fatal("connect made the folder of an agent that is not here")
	}

	// --print shows the entry with this binary's full path, and writes nothing.
	code, out, stderr = e.airlock(t, "connect", "--print", "codex")
	if code != 0 || !strings.Contains(stderr, filepath.Join(e.home, ".codex", "config.toml")) {
		t.Fatalf("print (%d): %s %s", code, out, stderr)
	}
	var printed struct {
		MCPServers map[string]struct {
			Command string
			Args    []string
		} `toml:"mcp_servers"`
	}
	if err := toml.Unmarshal([]byte(out), &printed); err != nil || printed.MCPServers["airlock"].Command != bin {
		t.Fatalf("printed %q (%v), want command %s", out, err, bin)
	}

	// Claude Desktop and Codex are installed: connect both.
	claude := filepath.Join(e.config, "Claude", "claude_desktop_config.json")
	if err := os.MkdirAll(filepath.Dir(claude), 0o700); err != nil {
		t.Fatal(err)
	}
	orig := "{\n  \"mcpServers\": {\n    \"fs\": {\"command\": \"npx\", \"args\": [\"-y\", \"fs\"]}\n  },\n  \"future\": {\"x\": 1.50}\n}\n"
	if err := os.WriteFile(claude, []byte(orig), 0o644); err != nil {
		t.Fatal(err)
	}
	codex := filepath.Join(e.home, ".codex", "config.toml")
	if err := os.MkdirAll(filepath.Dir(codex), 0o700); err != nil {
		t.Fatal(err)
	}
	code, out, stderr = e.airlock(t, "connect", "claude-desktop", "codex")
	if code != 0 || !strings.Contains(out, "Claude Desktop connected") || !strings.Contains(out, "Codex connected") {
		t.Fatalf("connect (%d): %s %s", code, out, stderr)
	}
	var doc struct {
		MCPServers map[string]struct {
			Command string   `json:"command"`
			Args    []string `json:"args"`
		} `json:"mcpServers"`
		Future map[string]float64 `json:"future"`
	}
	b, _ := os.ReadFile(claude)
	if err := json.Unmarshal(b, &doc); err != nil || doc.MCPServers["airlock"].Command != bin || doc.MCPServers["fs"].Command != "npx" || doc.Future["x"] != 1.5 {
		t.Fatalf("%s (%v)", b, err)
	}
	if !bytes.Contains(b, []byte(`"future": {"x": 1.50}`)) {
		t.Fatalf("the rest of the file was rewritten:\n%s", b)
	}
	if bk, _ := os.ReadFile(claude + ".airlock-backup"); string(bk) != orig {
		t.Fatalf("backup %q", bk)
	}
	if fi, _ := os.Stat(claude); fi.Mode().Perm() != 0o644 {
		t.Fatalf("mode %v", fi.Mode())
	}
	tb, _ := os.ReadFile(codex)
	if err := toml.Unmarshal(tb, &printed); err != nil || printed.MCPServers["airlock"].Command != bin || strings.Join(printed.MCPServers["airlock"].Args, " ") != "mcp" {
		t.Fatalf("codex %s (%v)", tb, err)
	}

	// Twice changes nothing; the list says connected.
	before, _ := os.Stat(claude)
	code, out, _ = e.airlock(t, "connect", "claude-desktop")
	if code != 0 || !strings.Contains(out, "was already connected") {
		t.Fatalf("again (%d): %s", code, out)
	}
	if after, _ := os.Stat(claude); !os.SameFile(before, after) || !after.ModTime().Equal(before.ModTime()) {
		t.Fatal("connecting again rewrote the file")
	}
	code, out, _ = e.airlock(t, "--json", "connect")
	var sts []struct {
		Name      string
		Found     bool
		Connected bool
	}
	if err := json.Unmarshal([]byte(out), &sts); code != 0 || err != nil {
		t.Fatalf("%d %v %s", code, err, out)
	}
	for _, s := range sts {
		want := s.Name == "claude-desktop" || s.Name == "codex"
		if s.Found != want || s.Connected != want {
			t.Fatalf("%+v", sts)
		}
	}

	// Disconnect gives Claude Desktop's file back as it was.
	code, out, _ = e.airlock(t, "disconnect", "claude-desktop")
	if b, _ := os.ReadFile(claude); code != 0 || string(b) != orig {
		t.Fatalf("disconnect (%d) %s:\n%s", code, out, b)
	}

	// A broken file is left alone, named with its line.
	broken := []byte("model = \"o3\"\n[mcp_servers\n")
	if err := os.WriteFile(codex, broken, 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = e.airlock(t, "disconnect", "codex")
	if code != 125 || !strings.Contains(stderr, codex) || !strings.Contains(stderr, "line 2") {
		t.Fatalf("broken (%d): %s", code, stderr)
	}
	if b, _ := os.ReadFile(codex); !bytes.Equal(b, broken) {
		t.Fatal("the broken file changed")
	}
	if code, _, stderr = e.airlock(t, "connect", "emacs"); code != 125 || !strings.Contains(stderr, "claude-desktop, claude-code, codex, cursor, vscode") {
		t.Fatalf("unknown agent (%d): %s", code, stderr)
	}
}
