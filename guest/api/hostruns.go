package api

import "strings"

// HostRunPath is a workspace path whose contents the user's own tools run
// on the host, as the user, without asking.
type HostRunPath struct {
	// Path is slash-separated, relative to the workspace root.
	Path string
	// Dir marks a folder: everything in it counts.
	Dir bool
}

// HostRunPaths are the paths a task must not change behind the user's
// back: git's config (core.fsmonitor, core.pager, core.hooksPath, aliases)
// and hooks, direnv's .envrc, VS Code's tasks and settings, JetBrains' run
// configurations. A task that edits them has the host run its code the
// next time the user runs `git status` or opens the folder. The guest
// agent makes them read-only to tasks; the host never applies a change to
// them without the user's review.
var HostRunPaths = []HostRunPath{
	{Path: ".git/config"},
	{Path: ".git/hooks", Dir: true},
	{Path: ".envrc"},
	{Path: ".vscode", Dir: true},
	{Path: ".idea", Dir: true},
}

// HostRuns reports whether a change to the workspace path p (slash-separated,
// clean) can change what the user's tools run on the host: p is one of
// HostRunPaths, inside one of its folders, or a folder that holds one
// (replacing .git with a symlink or a new folder replaces its config).
func HostRuns(p string) bool {
	for _, h := range HostRunPaths {
		if p == h.Path || strings.HasPrefix(h.Path, p+"/") || h.Dir && strings.HasPrefix(p, h.Path+"/") {
			return true
		}
	}
	return false
}
