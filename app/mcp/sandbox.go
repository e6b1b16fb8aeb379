package mcp

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/app/egress"
	"github.com/airlock-sandbox/airlock/guest/api"
	"github.com/airlock-sandbox/airlock/internal/printable"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// StatusInput is sandbox_status's input: nothing.
type StatusInput struct{}

// SandboxStatus is what sandbox_status returns.
type SandboxStatus struct {
	VMState   string `json:"vm_state" jsonschema:"stopped, starting, running, stopping, restarting or failed; a task boots a stopped VM"`
	VMPhase   string `json:"vm_phase,omitempty"`
	LastError string `json:"last_error,omitempty"`
	// UptimeSeconds is how long the running VM has been up.
	UptimeSeconds float64 `json:"uptime_seconds,omitempty"`
	Restarts      int     `json:"restarts,omitempty"`
	// WorkspaceGuestPath is where the user's folder is in the sandbox.
	WorkspaceGuestPath string   `json:"workspace_guest_path"`
	WorkspaceHostPath  string   `json:"workspace_host_path" jsonschema:"the user's folder on their computer that the sandbox sees"`
	ReadOnly           bool     `json:"read_only" jsonschema:"the workspace is mounted read-only"`
	ChangesMode        string   `json:"changes_mode,omitempty" jsonschema:"direct: writes reach the user's folder at once; review: they wait for the user (list_changes); auto: applied when no task runs, undoable"`
	CPUs               int      `json:"cpus"`
	MemoryMiB          int      `json:"memory_mib"`
	TaskUser           string   `json:"task_user"`
	RunningTasks       int      `json:"running_tasks"`
	EgressAllow        []string `json:"egress_allow" jsonschema:"hosts tasks may reach (exact host, *.domain for subdomains, optional :port)"`
	EgressDeny         []string `json:"egress_deny" jsonschema:"hosts refused even when allowed"`
	Note               string   `json:"note"`
}

func (h *handlers) sandboxStatus(ctx context.Context, _ *sdk.CallToolRequest, _ StatusInput) (*sdk.CallToolResult, SandboxStatus, error) {
	st, err := h.core.Status(ctx)
	if err != nil {
		return nil, SandboxStatus{}, fmt.Errorf("sandbox_status: Airlock did not answer: %w", err)
	}
	ss, set := st.Session, st.Settings
	res := SandboxStatus{
		VMState: string(ss.State), VMPhase: ss.Phase, LastError: ss.LastError,
		UptimeSeconds: ss.Uptime.Round(time.Second).Seconds(), Restarts: ss.Restarts,
		WorkspaceGuestPath: api.WorkspaceDir,
		// The settings are what the next task's VM gets; a running VM was
		// booted with them too, since changing the workspace restarts it.
		WorkspaceHostPath: set.Workspace, ReadOnly: set.ReadOnly, CPUs: set.CPUs, MemoryMiB: set.MemoryMiB,
		TaskUser:     fmt.Sprintf("%s (uid %d); root: true runs a task as root", api.UserName, api.DefaultUID),
		RunningTasks: st.RunningTasks,
		EgressAllow:  nonNil(set.Allow), EgressDeny: nonNil(set.Deny),
		Note: "Only the user can change the workspace, its read-only mode, the VM size or the egress lists (in the Airlock app, " +
			"or with `airlock egress allow HOST` / `airlock workspace set DIR`); this server cannot.",
	}
	if set.Workspace != "" && !set.ReadOnly {
		res.ChangesMode = string(set.ChangesMode(set.Workspace))
	}
	if set.Workspace == "" {
		res.Note = "No workspace folder is chosen yet: ask the user to choose one in Airlock. " + res.Note
	}
	return nil, res, nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// Bounds of egress_log.
const (
	defaultEgressLimit = 50
	maxEgressLimit     = 500
	maxHostFilter      = 255
)

// EgressInput is what egress_log takes.
type EgressInput struct {
	Limit      int    `json:"limit,omitempty" jsonschema:"how many decisions to return, the most recent ones (default 50, at most 500)"`
	DeniedOnly bool   `json:"denied_only,omitempty" jsonschema:"only refused connections"`
	Host       string `json:"host,omitempty" jsonschema:"only hosts containing this text"`
	TaskID     string `json:"task_id,omitempty" jsonschema:"only connections made by this task"`
}

// EgressEntry is one decision of the gate.
type EgressEntry struct {
	Time      time.Time `json:"time"`
	TaskID    string    `json:"task_id,omitempty"`
	Protocol  string    `json:"protocol" jsonschema:"http, connect (HTTPS and other tunnels) or socks"`
	Host      string    `json:"host,omitempty"`
	Port      uint16    `json:"port,omitempty"`
	Decision  string    `json:"decision" jsonschema:"allow or deny"`
	Reason    string    `json:"reason" jsonschema:"e.g. allowed-by-rule, no-matching-rule, denied-by-rule, private-address, resolve-failed"`
	Rule      string    `json:"rule,omitempty"`
	Detail    string    `json:"detail,omitempty"`
	BytesUp   int64     `json:"bytes_up,omitempty"`
	BytesDown int64     `json:"bytes_down,omitempty"`
	Repeated  int       `json:"repeated,omitempty" jsonschema:"set on a summary: this many more refusals identical to the one before were counted, not listed"`
}

// EgressResult is what egress_log returns.
type EgressResult struct {
	Decisions []EgressEntry `json:"decisions" jsonschema:"oldest first, newest last"`
	// Matching counts the decisions kept in memory that matched, before the limit.
	Matching int `json:"matching"`
	// Refused lists the distinct host:port the shown decisions refused
	// because no rule allows them: the ones to ask the user about.
	Refused []string `json:"refused_not_allowed,omitempty"`
	Note    string   `json:"note,omitempty"`
}

func (h *handlers) egressLog(ctx context.Context, _ *sdk.CallToolRequest, in EgressInput) (*sdk.CallToolResult, EgressResult, error) {
	switch {
	case in.Limit < 0 || in.Limit > maxEgressLimit:
		return nil, EgressResult{}, fmt.Errorf("egress_log: limit must be 1 to %d (default %d)", maxEgressLimit, defaultEgressLimit)
	case len(in.Host) > maxHostFilter:
		return nil, EgressResult{}, fmt.Errorf("egress_log: host filter is over %d bytes", maxHostFilter)
	case len(in.TaskID) > maxIDBytes:
		return nil, EgressResult{}, fmt.Errorf("egress_log: task_id is %d bytes; task ids are 8 characters", len(in.TaskID))
	}
	limit := in.Limit
	if limit == 0 {
		limit = defaultEgressLimit
	}
	all, err := h.core.EgressLog(ctx)
	if err != nil {
		return nil, EgressResult{}, fmt.Errorf("egress_log: Airlock did not answer: %w", err)
	}
	host := strings.ToLower(in.Host)
	var match []egress.Decision
	for _, d := range all {
		if in.DeniedOnly && d.Action != egress.ActionDeny ||
			host != "" && !strings.Contains(strings.ToLower(d.Host), host) ||
			in.TaskID != "" && d.Task != in.TaskID {
			continue
		}
		match = append(match, d)
	}
	res := EgressResult{Decisions: []EgressEntry{}, Matching: len(match)}
	for _, d := range match[max(0, len(match)-limit):] {
		// The host is what the guest asked for; the client may show
		// these strings on a terminal, so they come out escaped.
		host := printable.String(d.Host)
		res.Decisions = append(res.Decisions, EgressEntry{
			Time: d.Time, TaskID: printable.String(d.Task), Protocol: string(d.Protocol), Host: host, Port: d.Port,
			Decision: string(d.Action), Reason: string(d.Reason), Rule: printable.String(d.Rule), Detail: printable.String(d.Detail),
			BytesUp: d.BytesUp, BytesDown: d.BytesDown, Repeated: d.Repeated,
		})
		if d.Reason == egress.ReasonNoMatchingRule && d.Host != "" {
			hp := fmt.Sprintf("%s:%d", host, d.Port)
			if !slices.Contains(res.Refused, hp) {
				res.Refused = append(res.Refused, hp)
			}
		}
	}
	switch {
	case len(res.Refused) > 0:
		res.Note = "Connections to " + strings.Join(res.Refused, ", ") + " were refused because no rule allows them. " +
			"You cannot change the allowlist: tell the user which host is needed and why; they can allow it in Airlock or with `airlock egress allow HOST`."
	case len(all) == 0:
		res.Note = "No connection attempts are recorded yet."
	}
	return nil, res, nil
}
