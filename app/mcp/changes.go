package mcp

import (
	"context"
	"fmt"

	"github.com/airlock-sandbox/airlock/app/changes"
	"github.com/airlock-sandbox/airlock/internal/printable"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Bounds of list_changes.
const (
	defaultChangesLimit = 200
	maxChangesLimit     = 2000
)

// ChangesInput is what list_changes takes.
type ChangesInput struct {
	Limit int `json:"limit,omitempty" jsonschema:"how many changes to return, in path order (default 200, at most 2000)"`
}

// ChangeEntry is one pending change.
type ChangeEntry struct {
	Path         string `json:"path" jsonschema:"relative to /workspace"`
	Kind         string `json:"kind" jsonschema:"added, modified, deleted, renamed or mode"`
	From         string `json:"from,omitempty" jsonschema:"the old path of a rename"`
	Type         string `json:"type,omitempty" jsonschema:"file, dir or symlink"`
	Size         int64  `json:"size"`
	LinesAdded   int    `json:"lines_added,omitempty"`
	LinesRemoved int    `json:"lines_removed,omitempty"`
	Conflict     bool   `json:"conflict,omitempty" jsonschema:"the user changed the file on their side too"`
	HostRuns     bool   `json:"host_runs,omitempty" jsonschema:"a file the user's tools run (.git/config, .envrc, ...): never applied without the user"`
}

// ChangesResult is what list_changes returns.
type ChangesResult struct {
	Mode    string        `json:"mode" jsonschema:"direct (writes reach the folder at once), review (they wait for the user) or auto (applied when no task runs)"`
	Pending int           `json:"pending" jsonschema:"how many changes wait, before the limit"`
	Changes []ChangeEntry `json:"changes"`
	Note    string        `json:"note"`
}

func (h *handlers) listChanges(ctx context.Context, _ *sdk.CallToolRequest, in ChangesInput) (*sdk.CallToolResult, ChangesResult, error) {
	if in.Limit < 0 || in.Limit > maxChangesLimit {
		return nil, ChangesResult{}, fmt.Errorf("list_changes: limit must be 1 to %d (default %d)", maxChangesLimit, defaultChangesLimit)
	}
	limit := in.Limit
	if limit == 0 {
		limit = defaultChangesLimit
	}
	l, err := h.core.Changes(ctx)
	if err != nil {
		return nil, ChangesResult{}, fmt.Errorf("list_changes: %w", err)
	}
	res := ChangesResult{Mode: string(l.Mode), Pending: len(l.Entries), Changes: []ChangeEntry{}}
	for _, e := range l.Entries[:min(len(l.Entries), limit)] {
		// Paths are what the guest named; a client may print them.
		res.Changes = append(res.Changes, ChangeEntry{
			Path: printable.String(e.Path), Kind: string(e.Kind), From: printable.String(e.From), Type: string(e.Type),
			Size: e.Size, LinesAdded: e.LinesAdded, LinesRemoved: e.LinesRemoved, Conflict: e.Conflict, HostRuns: e.HostRuns,
		})
	}
	switch {
	case l.Mode == changes.Direct:
		res.Note = "The workspace is in direct mode: what tasks write reaches the user's folder at once, so nothing waits here."
	case len(l.Entries) == 0:
		res.Note = "No changes wait: the user's folder has everything tasks wrote (or the user discarded it)."
	default:
		res.Note = "These changes wait for the user, who reviews, applies or discards them in Airlock (`airlock changes`, `airlock apply`); " +
			"you cannot apply, discard or undo them. /workspace in the sandbox already shows them."
		if len(l.Entries) > limit {
			res.Note += fmt.Sprintf(" Only the first %d of %d are listed.", limit, len(l.Entries))
		}
	}
	return nil, res, nil
}
