package desktop

import (
	"fmt"
	"os"

	"github.com/airlock-sandbox/airlock/app/agents"
	"github.com/airlock-sandbox/airlock/app/api"
)

// agentsAPI lets the window's Settings → Agents connect the agents on this
// machine to the airlock command that comes with the app (the helper's
// program: Contents/Helpers/airlock in a macOS bundle, beside the app
// elsewhere), which the agents then run as `airlock mcp`.
func agentsAPI(goos string) api.Option {
	exe, err := os.Executable()
	if err != nil {
		return api.WithAgents(api.Agents{Unavailable: fmt.Errorf("agents cannot be connected from this app: %w", err)})
	}
	return agentsAPIFor(exe, goos)
}

// agentsAPIFor is agentsAPI for the app's executable exe.
func agentsAPIFor(exe, goos string) api.Option {
	var a api.Agents
	exe, err := FindHelper(exe, goos)
	if err != nil {
		a.Unavailable = fmt.Errorf("agents cannot be connected from this app: %w", err)
		return api.WithAgents(a)
	}
	a.Entry = agents.MCPEntry(exe)
	a.Host, a.Unavailable = agents.Local()
	return api.WithAgents(a)
}
