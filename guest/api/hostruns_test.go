package api

import "testing"

func TestHostRuns(t *testing.T) {
	for p, want := range map[string]bool{
		".git/config":           true,
		".git":                  true, // holds config and hooks
		".git/hooks":            true,
		".git/hooks/pre-commit": true,
		".git/objects/ab":       false,
		".git/configx":          false,
		".envrc":                true,
		".envrc/x":              false,
		".vscode":               true,
		".vscode/tasks.json":    true,
		".idea/workspace.xml":   true,
		"src/.envrc":            false,
		".vscodex":              false,
		"README.md":             false,
	} {
		if got := HostRuns(p); got != want {
			t.Errorf("HostRuns(%q) = %v, want %v", p, got, want)
		}
	}
}
