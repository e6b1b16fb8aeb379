// Package agents adds and removes Airlock's MCP server entry in the
// configuration of the agents that run MCP servers on the user's machine
// (Claude Desktop, Claude Code, Codex, Cursor, VS Code), at the path and in
// the format each of them reads.
//
// An edit changes the one entry and leaves every other byte of the file as
// it was: JSON is edited in its syntax tree (github.com/tailscale/hujson,
// which keeps whitespace and comments), Codex's TOML by the byte ranges its
// parser (github.com/pelletier/go-toml/v2/unstable) reports. A file that
// does not parse is left untouched; the first change of a file keeps a copy
// of it beside it; an edit that changes nothing writes nothing.
package agents

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// ServerName is the name of Airlock's entry in every agent's configuration.
const ServerName = "airlock"

// ErrUnknown is returned for an agent name this package does not know.
var ErrUnknown = errors.New("unknown agent")

// ErrNotFound is returned by Connect when the agent is not on this machine.
var ErrNotFound = errors.New("not found on this machine")

// format is how an agent's file is written.
type format int

const (
	formatJSON  format = iota // strict JSON: the agent reads it with a JSON parser
	formatJSONC               // JSON with comments and trailing commas (VS Code, Cursor)
	formatTOML                // TOML (Codex)
)

// Agent describes one agent: its name on the command line, what a person
// calls it, and where and how it keeps its MCP servers.
type Agent struct {
	Name  string `json:"name"`
	Title string `json:"title"`

	format format
	// container is the key (JSON) or table (TOML) that holds the servers.
	container string
	// stdioType adds "type": "stdio" to the entry, as the agent's own
	// tools write it.
	stdioType bool
	// emptyEnv adds "env": {}, as `claude mcp add` writes it.
	emptyEnv bool
	// command is the agent's program, whose presence on PATH counts as the
	// agent being installed.
	command string
	// path is the configuration file; marker the folder whose presence
	// says the agent has run here.
	path, marker func(h Host) string
}

// all lists the agents in the order they are shown.
var all = []Agent{
	{
		// Claude Desktop keeps claude_desktop_config.json in its Electron
		// app-data folder: ~/Library/Application Support/Claude on macOS,
		// %APPDATA%\Claude on Windows (modelcontextprotocol.io, "Connect to
		// local MCP servers"), and ~/.config/Claude for its Linux builds.
		Name: "claude-desktop", Title: "Claude Desktop", format: formatJSON, container: "mcpServers",
		path:   func(h Host) string { return filepath.Join(h.appData(), "Claude", "claude_desktop_config.json") },
		marker: func(h Host) string { return filepath.Join(h.appData(), "Claude") },
	},
	{
		// Claude Code's user scope is the top-level "mcpServers" of
		// ~/.claude.json, or of $CLAUDE_CONFIG_DIR/.claude.json when that
		// is set (code.claude.com/docs/en/mcp, "MCP installation scopes");
		// `claude mcp add -s user` writes "type": "stdio" and "env": {}.
		Name: "claude-code", Title: "Claude Code", format: formatJSON, container: "mcpServers",
		stdioType: true, emptyEnv: true, command: "claude",
		path: func(h Host) string {
			if d := h.env("CLAUDE_CONFIG_DIR"); d != "" {
				return filepath.Join(d, ".claude.json")
			}
			return filepath.Join(h.Home, ".claude.json")
		},
		marker: func(h Host) string {
			if d := h.env("CLAUDE_CONFIG_DIR"); d != "" {
				return d
			}
			return filepath.Join(h.Home, ".claude")
		},
	},
	{
		// Codex reads [mcp_servers.NAME] tables from ~/.codex/config.toml,
		// or $CODEX_HOME/config.toml (developers.openai.com/codex/mcp,
		// "Configure with config.toml").
		Name: "codex", Title: "Codex", format: formatTOML, container: "mcp_servers", command: "codex",
		path:   func(h Host) string { return filepath.Join(h.codexHome(), "config.toml") },
		marker: func(h Host) string { return h.codexHome() },
	},
	{
		// Cursor's global servers are in ~/.cursor/mcp.json, under
		// "mcpServers" (cursor.com/docs/mcp, "Configuration
		// locations"); on Windows ~ is %USERPROFILE%. Cursor is built on
		// VS Code, whose JSON files may hold comments: a comment is kept,
		// not refused.
		Name: "cursor", Title: "Cursor", format: formatJSONC, container: "mcpServers", command: "cursor",
		path:   func(h Host) string { return filepath.Join(h.Home, ".cursor", "mcp.json") },
		marker: func(h Host) string { return filepath.Join(h.Home, ".cursor") },
	},
	{
		// VS Code keeps the user profile's MCP servers in mcp.json beside
		// settings.json, under "servers", each with a "type"
		// (code.visualstudio.com/docs/copilot/reference/mcp-configuration);
		// the user folder is Code/User in the app-data folder
		// (code.visualstudio.com/docs/getstarted/settings, "Settings file
		// locations"). The file may hold comments.
		Name: "vscode", Title: "VS Code", format: formatJSONC, container: "servers", stdioType: true, command: "code",
		path:   func(h Host) string { return filepath.Join(h.appData(), "Code", "User", "mcp.json") },
		marker: func(h Host) string { return filepath.Join(h.appData(), "Code") },
	},
}

// All returns the agents, in the order they are shown.
func All() []Agent { return append([]Agent(nil), all...) }

// Names returns the agents' names.
func Names() []string {
	out := make([]string, len(all))
	for i, a := range all {
		out[i] = a.Name
	}
	return out
}

// Lookup returns the agent called name.
func Lookup(name string) (Agent, error) {
	for _, a := range all {
		if a.Name == name {
			return a, nil
		}
	}
	return Agent{}, fmt.Errorf("%w %q: choose one of %s", ErrUnknown, name, strings.Join(Names(), ", "))
}

// Host is the machine whose agents are configured: its OS, the user's home
// folder and environment, and how a program is found on PATH. Tests pass a
// fake home and environment.
type Host struct {
	GOOS     string
	Home     string
	Getenv   func(string) string
	LookPath func(string) (string, error)
}

// Local is this machine and user.
func Local() (Host, error) {
	home, err := os.UserHomeDir()
	if err != nil {
		return Host{}, fmt.Errorf("agents: the home folder is unknown: %w", err)
	}
	return Host{GOOS: runtime.GOOS, Home: home, Getenv: os.Getenv, LookPath: exec.LookPath}, nil
}

func (h Host) env(k string) string {
	if h.Getenv == nil {
		return ""
	}
	v := h.Getenv(k)
	if !filepath.IsAbs(v) {
		return "" // a relative value would depend on the folder airlock runs in
	}
	return v
}

// appData is where desktop apps keep their settings: what Electron calls
// appData, which is also where VS Code's user folder lives.
func (h Host) appData() string {
	switch h.GOOS {
	case "darwin":
		return filepath.Join(h.Home, "Library", "Application Support")
	case "windows":
		if d := h.env("APPDATA"); d != "" {
			return d
		}
		return filepath.Join(h.Home, "AppData", "Roaming")
	default:
		if d := h.env("XDG_CONFIG_HOME"); d != "" {
			return d
		}
		return filepath.Join(h.Home, ".config")
	}
}

func (h Host) codexHome() string {
	if d := h.env("CODEX_HOME"); d != "" {
		return d
	}
	return filepath.Join(h.Home, ".codex")
}

// Path returns where agent a keeps its MCP servers on h.
func (h Host) Path(a Agent) string { return a.path(h) }

// found says whether a is on h: its configuration file or folder exists,
// or its program is on PATH.
func (h Host) found(a Agent) bool {
	for _, p := range []string{a.path(h), a.marker(h)} {
		if _, err := os.Stat(p); err == nil {
			return true
		}
	}
	if a.command != "" && h.LookPath != nil {
		if _, err := h.LookPath(a.command); err == nil {
			return true
		}
	}
	return false
}

// Entry is the MCP server an agent is to run: Airlock's own program, by its
// full path, and its arguments.
type Entry struct {
	Command string   `json:"command"`
	Args    []string `json:"args"`
}

// field is one key of an agent's entry with the value Airlock writes.
type field struct {
	key   string
	value any // string, []string, map[string]string or []field
	// keep leaves a value the file already has: only a missing key is
	// added.
	keep bool
}

func (a Agent) fields(e Entry) []field {
	var out []field
	if a.stdioType {
		out = append(out, field{key: "type", value: "stdio"})
	}
	args := e.Args
	if args == nil {
		args = []string{}
	}
	out = append(out, field{key: "command", value: e.Command}, field{key: "args", value: args})
	if a.emptyEnv {
		out = append(out, field{key: "env", value: map[string]string{}, keep: true})
	}
	return out
}

// MCPEntry is the entry for the airlock program at path: `airlock mcp`.
func MCPEntry(path string) Entry { return Entry{Command: path, Args: []string{"mcp"}} }
