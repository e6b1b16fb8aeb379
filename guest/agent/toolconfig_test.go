//go:build linux

package agent

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/guest/api"
)

const toolHelperEnv = "AIRLOCK_TOOLCONFIG_HELPER"

// In its own mount namespace (TestProtectTools), the test binary protects a
// folder's tool configuration and tries to change it, printing what the
// kernel said.
func init() {
	if os.Getenv(toolHelperEnv) == "" {
		return
	}
	ws := os.Args[1]
	dfd, err := unix.Open(ws, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(1)
	}
	for i := 0; i < 2; i++ { // a second pass finds everything protected
		if err := errors.Join(protectTools(dfd, toolConfig, 1000, 1000), protectGitReferences(dfd)); err != nil {
			fmt.Println("protect:", err)
			os.Exit(1)
		}
	}
	try := func(name string, err error) {
		res := "ok"
		var en unix.Errno
		if errors.As(err, &en) {
			res = unix.ErrnoName(en)
		} else if err != nil {
			res = err.Error()
		}
		fmt.Printf("%s=%s\n", name, res)
	}
	j := func(p ...string) string { return filepath.Join(append([]string{ws}, p...)...) }
	try("config.write", os.WriteFile(j(".git", "config"), []byte("[core]\n\tpager = evil\n"), 0o644))
	try("config.unlink", unix.Unlink(j(".git", "config")))
	os.WriteFile(j(".git", "c2"), []byte("evil"), 0o644)
	try("config.rename", unix.Rename(j(".git", "c2"), j(".git", "config")))
	try("hooks.create", os.WriteFile(j(".git", "hooks", "pre-commit"), []byte("evil"), 0o755))
	try("hooks.rename", unix.Rename(j(".git", "hooks"), j(".git", "h2")))
	try("git.rename", unix.Rename(j(".git"), j("git2")))
	try("git.objects", os.WriteFile(j(".git", "objects", "x"), []byte("x"), 0o644))
	try("envrc.write", os.WriteFile(j(".envrc"), []byte("evil"), 0o644))
	try("envrc.unlink", unix.Unlink(j(".envrc")))
	try("vscode.write", os.WriteFile(j(".vscode", "tasks.json"), []byte("evil"), 0o644))
	try("vscode.rename", unix.Rename(j(".vscode"), j("vs2")))
	try("idea.create", os.WriteFile(j(".idea", "evil.xml"), []byte("evil"), 0o644))
	try("other.write", os.WriteFile(j("main.go"), []byte("package main"), 0o644))
	try("husky.write", os.WriteFile(j(".husky", "pre-commit"), []byte("evil"), 0o755))
	try("include.write", os.WriteFile(j(".gitconfig"), []byte("[core]\n\tfsmonitor = evil\n"), 0o644))
	try("fsmonitor.write", os.WriteFile(j("tools", "fsmon.sh"), []byte("evil"), 0o755))
	try("tools.other", os.WriteFile(j("tools", "other.sh"), []byte("fine"), 0o755))
	os.Exit(0)
}

// TestProtectTools: the tool configuration that exists cannot be
// changed, removed or renamed away; a missing hooks folder is made
// (empty) and protected; the rest of .git and the folder stay writable.
func TestProtectTools(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("bind mounts need root (in a mount namespace of the test's own)")
	}
	ws := t.TempDir()
	for _, d := range []string{".git/objects", ".vscode", ".idea"} {
		os.MkdirAll(filepath.Join(ws, d), 0o755)
	}
	config := "[core]\n\thooksPath = .husky/_\n\tfsmonitor = tools/fsmon.sh\n[include]\n\tpath = ../.gitconfig\n"
	os.WriteFile(filepath.Join(ws, ".git", "config"), []byte(config), 0o644)
	os.MkdirAll(filepath.Join(ws, ".husky", "_"), 0o755)
	os.MkdirAll(filepath.Join(ws, "tools"), 0o755)
	os.WriteFile(filepath.Join(ws, ".husky", "pre-commit"), []byte("npm test\n"), 0o755)
	os.WriteFile(filepath.Join(ws, ".gitconfig"), []byte("[alias]\n"), 0o644)
	os.WriteFile(filepath.Join(ws, "tools", "fsmon.sh"), []byte("#!/bin/sh\n"), 0o755)
	os.WriteFile(filepath.Join(ws, ".envrc"), []byte("export A=1\n"), 0o644)
	os.WriteFile(filepath.Join(ws, ".vscode", "tasks.json"), []byte("{}"), 0o644)
	cmd := exec.Command(os.Args[0], ws)
	cmd.Env = append(os.Environ(), toolHelperEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		k, v, _ := strings.Cut(l, "=")
		got[k] = v
	}
	want := map[string]string{
		"config.write": "EROFS", "config.unlink": "EBUSY", "config.rename": "EBUSY",
		"hooks.create": "EROFS", "hooks.rename": "EBUSY", "git.rename": "EBUSY", "git.objects": "ok",
		"envrc.write": "EROFS", "envrc.unlink": "EBUSY",
		"vscode.write": "EROFS", "vscode.rename": "EBUSY", "idea.create": "EROFS",
		"other.write": "ok",
		"husky.write": "EROFS", "include.write": "EROFS", "fsmonitor.write": "EROFS", "tools.other": "ok",
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: got %q, want %q", k, got[k], w)
		}
	}
	if t.Failed() {
		t.Logf("helper output:\n%s", out)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, ".git", "config")); string(b) != config {
		t.Errorf(".git/config is now %q", b)
	}
	if fi, err := os.Stat(filepath.Join(ws, ".git", "hooks")); err != nil || !fi.IsDir() {
		t.Errorf("no empty hooks folder was made: %v", err)
	}
}

func TestGitReferences(t *testing.T) {
	config := `[core]
	repositoryformatversion = 0
	hooksPath = ".husky/_" ; husky
	fsmonitor = tools/watch.sh
[core "x"] fsmonitor = true
[include]
	path = ../shared.gitconfig
	path = ~/.gitconfig
	path = /etc/gitconfig
	path = ../../outside
[includeIf "gitdir:~/work/"]
	path = extra.cfg
[alias]
	path = nothing
[CORE] hooksPath = hooks # comment
[core]
	hookspath = .git/myhooks
	fsmonitor = watchman --flag
`
	want := []string{".husky", "tools/watch.sh", "shared.gitconfig", ".git/extra.cfg", "hooks", ".git/myhooks"}
	got := gitReferences([]byte(config))
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("gitReferences = %q, want %q", got, want)
	}
}

// TestToolTree: the shared list becomes the tree the agent protects.
func TestToolTree(t *testing.T) {
	want := []toolPath{
		{name: ".git", self: true, children: []toolPath{
			{name: "config"},
			{name: "hooks", dir: true, create: true},
		}},
		{name: ".envrc"},
		{name: ".vscode", dir: true},
		{name: ".idea", dir: true},
	}
	if got := toolTree(api.HostRunPaths); !reflect.DeepEqual(got, want) {
		t.Fatalf("toolTree = %+v\nwant %+v", got, want)
	}
}
