//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestMCP connects the MCP SDK's own client to `airlock mcp` (no service
// running, so it runs one in process) and has it run commands in a real VM.
func TestMCP(t *testing.T) {
	root, err := os.MkdirTemp("", "airlock-mcp-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(root)
	cmd := exec.Command(airlockBin, "mcp")
	cmd.Env = append(os.Environ(),
		"AIRLOCK_IMAGE_DIR="+imageRoot,
		"XDG_RUNTIME_DIR="+filepath.Join(root, "run"),
		"XDG_CONFIG_HOME="+filepath.Join(root, "config"),
		"XDG_STATE_HOME="+filepath.Join(root, "state"),
		"XDG_CACHE_HOME="+filepath.Join(root, "cache"))
	cmd.Stderr = os.Stderr
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "e2e", Version: "1"}, nil).Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	call := func(name string, args map[string]any) map[string]any {
		t.Helper()
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if res.IsError {
			t.Fatalf("%s: tool error %+v", name, res.Content)
		}
		var out map[string]any
		b, _ := json.Marshal(res.StructuredContent)
		json.Unmarshal(b, &out)
		return out
	}
	got := call("run_command", map[string]any{"command": "echo hi from $(uname -s); echo oops >&2; exit 3"})
	if got["exit_code"] != float64(3) || got["stdout"] != "hi from Linux\n" || got["stderr"] != "oops\n" {
		t.Fatalf("run_command: %v", got)
	}
	st := call("sandbox_status", map[string]any{})
	if st["vm_state"] != "running" || st["workspace_guest_path"] != "/workspace" {
		t.Fatalf("sandbox_status: %v", st)
	}
	call("run_command", map[string]any{"command": "wget -q -O- http://blocked.test/ || true"})
	eg := call("egress_log", map[string]any{"denied_only": true})
	if ds, _ := eg["decisions"].([]any); len(ds) == 0 {
		t.Fatalf("egress_log shows no refusal: %v", eg)
	}
}
