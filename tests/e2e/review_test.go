//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/app/changes"
	"github.com/airlock-sandbox/airlock/app/service"
)

// held is an airlock CLI with folders of its own (state, settings, no
// service), so that the held changes of one test's workspace are its own.
type held struct {
	t   *testing.T
	env []string
}

func newHeld(t *testing.T) *held {
	root := t.TempDir()
	return &held{t: t, env: append(os.Environ(), "AIRLOCK_IMAGE_DIR="+imageRoot,
		"XDG_RUNTIME_DIR="+filepath.Join(root, "run"), "XDG_CONFIG_HOME="+filepath.Join(root, "config"),
		"XDG_STATE_HOME="+filepath.Join(root, "state"), "XDG_CACHE_HOME="+filepath.Join(root, "cache"))}
}

// run runs the CLI and returns its exit code, stdout and stderr; a run
// keeps its console in the test's folder.
func (h *held) run(args ...string) (int, string, string) {
	h.t.Helper()
	if args[0] == "run" {
		args = slices.Insert(args, 1, "--console-log="+filepath.Join(h.t.TempDir(), "console.log"))
	}
	cmd := exec.Command(airlockBin, args...)
	cmd.Env = h.env
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		h.t.Fatal(err)
	}
	if code == 125 && args[0] == "run" {
		logConsole(h.t, args)
	}
	return code, out.String(), errOut.String()
}

// must runs the CLI and fails the test unless it exits 0.
func (h *held) must(args ...string) string {
	h.t.Helper()
	code, out, errOut := h.run(args...)
	if code != 0 {
		h.t.Fatalf("airlock %s: exit %d\nstdout %s\nstderr %s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// pending lists the held changes of ws by path.
func (h *held) pending(ws string) map[string]changes.Entry {
	h.t.Helper()
	var l service.ChangesList
	if err := json.Unmarshal([]byte(h.must("changes", "--json", "--workspace", ws)), &l); err != nil {
		h.t.Fatal(err)
	}
	m := map[string]changes.Entry{}
	for _, e := range l.Entries {
		m[e.Path] = e
	}
	return m
}

// hostFile is a file as the host has it: what undo must restore exactly.
type hostFile struct {
	data  string
	mode  os.FileMode
	mtime time.Time
}

func stat(t *testing.T, path string) (hostFile, bool) {
	t.Helper()
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return hostFile{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return hostFile{string(b), fi.Mode(), fi.ModTime()}, true
}

// writeOld writes a file with a modification time in the past, so that a
// later rewrite shows in its time.
func writeOld(t *testing.T, path, data string, mode os.FileMode) hostFile {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
	os.Chmod(path, mode)
	ownedByTaskUser(path) // as a user's own file, which the task user may write
	old := time.Date(2024, 3, 1, 12, 0, 0, 123456789, time.UTC)
	if err := os.Chtimes(path, old, old); err != nil {
		t.Fatal(err)
	}
	f, _ := stat(t, path)
	return f
}

// settle waits out the store's clock slack: a host file changed less
// than 2 s before a layer began may be one the guest never saw, so its
// change would conflict (app/changes clockSlack).
func settle() { time.Sleep(2500 * time.Millisecond) }

// TestChangesReview: in review mode a task's deletions and edits stay off
// the host; the CLI lists and diffs them, applies one path alone, undoes
// that exactly, and a later run sees what is still pending.
func TestChangesReview(t *testing.T) {
	h := newHeld(t)
	ws := newWorkspace(t)
	keep := writeOld(t, filepath.Join(ws, "keep.txt"), "a\nb\nc\n", 0o644)
	del := writeOld(t, filepath.Join(ws, "del.txt"), "bye\n", 0o644)
	mod := writeOld(t, filepath.Join(ws, "mod.txt"), "one\ntwo\n", 0o604)
	settle()

	code, _, errOut := h.run("run", "--changes", "review", "--workspace", ws, "--", "sh", "-c",
		`rm /workspace/del.txt && printf 'one\nTWO\nthree\n' > /workspace/mod.txt && echo new > /workspace/new.txt && cat /workspace/keep.txt >/dev/null`)
	if code != 0 {
		t.Fatalf("run: exit %d: %s", code, errOut)
	}
	if !strings.Contains(errOut, "wait for review") || !strings.Contains(errOut, "airlock changes --workspace "+ws) {
		t.Errorf("run does not say changes wait, and how to see them: %q", errOut)
	}
	// The host is as it was.
	for name, want := range map[string]hostFile{"keep.txt": keep, "del.txt": del, "mod.txt": mod} {
		if got, ok := stat(t, filepath.Join(ws, name)); !ok || got != want {
			t.Errorf("%s on the host changed in review mode: %+v, want %+v", name, got, want)
		}
	}
	if _, ok := stat(t, filepath.Join(ws, "new.txt")); ok {
		t.Error("new.txt reached the host in review mode")
	}

	p := h.pending(ws)
	if len(p) != 3 || p["del.txt"].Kind != changes.Deleted || p["new.txt"].Kind != changes.Added || p["mod.txt"].Kind != changes.Modified {
		t.Fatalf("pending = %+v, want del.txt deleted, mod.txt modified, new.txt added", p)
	}
	if e := p["mod.txt"]; !e.Text || e.LinesAdded != 2 || e.LinesRemoved != 1 || e.Size != int64(len("one\nTWO\nthree\n")) {
		t.Errorf("mod.txt = %+v, want a text file of 14 bytes, +2 -1", e)
	}
	diff := h.must("diff", "--workspace", ws, "mod.txt")
	for _, line := range []string{"-two", "+TWO", "+three", " one"} {
		if !strings.Contains(diff, "\n"+line+"\n") {
			t.Errorf("diff of mod.txt has no line %q:\n%s", line, diff)
		}
	}
	if strings.Contains(diff, "new.txt") {
		t.Errorf("diff of mod.txt shows another file:\n%s", diff)
	}

	// Apply one path: only it reaches the host.
	h.must("apply", "--workspace", ws, "mod.txt")
	if got, _ := stat(t, filepath.Join(ws, "mod.txt")); got.data != "one\nTWO\nthree\n" {
		t.Fatalf("mod.txt after apply: %q", got.data)
	}
	if got, ok := stat(t, filepath.Join(ws, "del.txt")); !ok || got != del {
		t.Error("applying mod.txt deleted del.txt")
	}
	if _, ok := stat(t, filepath.Join(ws, "new.txt")); ok {
		t.Error("applying mod.txt added new.txt")
	}
	if p := h.pending(ws); len(p) != 2 || p["mod.txt"].Path != "" {
		t.Errorf("pending after applying mod.txt: %+v", p)
	}
	var cps service.CheckpointList
	if err := json.Unmarshal([]byte(h.must("checkpoints", "--json", "--workspace", ws)), &cps); err != nil {
		t.Fatal(err)
	}
	if len(cps.Checkpoints) != 1 || !slices.Equal(cps.Checkpoints[0].Paths, []string{"mod.txt"}) || cps.Usage.LimitBytes <= 0 {
		t.Fatalf("checkpoints = %+v", cps)
	}

	// Undo: mod.txt is back exactly, bytes, mode and time.
	h.must("undo", "--workspace", ws)
	if got, _ := stat(t, filepath.Join(ws, "mod.txt")); got != mod {
		t.Errorf("mod.txt after undo = %+v, want %+v", got, mod)
	}

	// A later run on the folder continues from what is still pending: it
	// sees new.txt and no del.txt, and mod.txt as the host has it again.
	code, out, errOut := h.run("run", "--changes", "review", "--workspace", ws, "--", "sh", "-c",
		`cat /workspace/new.txt; test -e /workspace/del.txt || echo gone; cat /workspace/mod.txt`)
	if code != 0 || out != "new\ngone\none\ntwo\n" {
		t.Fatalf("second run: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if p := h.pending(ws); len(p) != 2 || p["new.txt"].Kind != changes.Added || p["del.txt"].Kind != changes.Deleted {
		t.Errorf("pending after the second run: %+v", p)
	}
	// Discard the rest: the host keeps its own versions.
	h.must("discard", "--workspace", ws)
	if p := h.pending(ws); len(p) != 0 {
		t.Errorf("pending after discard: %+v", p)
	}
	if got, ok := stat(t, filepath.Join(ws, "del.txt")); !ok || got != del {
		t.Error("discard touched del.txt")
	}
}

// TestChangesAuto: in auto mode (the default) what a task wrote is on the
// host when airlock run returns, as one checkpoint that undo takes back.
func TestChangesAuto(t *testing.T) {
	h := newHeld(t)
	ws := newWorkspace(t)
	gone := writeOld(t, filepath.Join(ws, "gone.txt"), "old\n", 0o600)
	settle()
	code, _, errOut := h.run("run", "--workspace", ws, "--", "sh", "-c",
		`echo hi > /workspace/a.txt && mkdir /workspace/d && echo x > /workspace/d/b && rm /workspace/gone.txt`)
	if code != 0 {
		t.Fatalf("run: exit %d: %s", code, errOut)
	}
	if strings.Contains(errOut, "wait for review") {
		t.Errorf("auto mode left changes waiting: %q", errOut)
	}
	if got, _ := stat(t, filepath.Join(ws, "a.txt")); got.data != "hi\n" {
		t.Errorf("a.txt on the host after the run: %q", got.data)
	}
	if got, _ := stat(t, filepath.Join(ws, "d", "b")); got.data != "x\n" {
		t.Errorf("d/b on the host after the run: %q", got.data)
	}
	if _, ok := stat(t, filepath.Join(ws, "gone.txt")); ok {
		t.Error("gone.txt is still on the host")
	}
	if p := h.pending(ws); len(p) != 0 {
		t.Errorf("auto mode left pending: %+v", p)
	}
	h.must("undo", "--workspace", ws)
	for _, name := range []string{"a.txt", filepath.Join("d", "b")} {
		if _, ok := stat(t, filepath.Join(ws, name)); ok {
			t.Errorf("%s is still on the host after undo", name)
		}
	}
	if got, ok := stat(t, filepath.Join(ws, "gone.txt")); !ok || got != gone {
		t.Errorf("gone.txt after undo = %+v, want %+v", got, gone)
	}

	// You edit a file between two runs, and the second run changes it:
	// it starts from your edit, so that is no conflict.
	// (A file the undo wrote is root's when the test runs as root: edit
	// one of the task user's.)
	writeOld(t, filepath.Join(ws, "edited.txt"), "edited\n", 0o644)
	settle()
	code, _, errOut = h.run("run", "--workspace", ws, "--", "sh", "-c", `echo more >> /workspace/edited.txt`)
	if code != 0 || strings.Contains(errOut, "wait for review") {
		t.Fatalf("second run: exit %d: %s", code, errOut)
	}
	if got, _ := stat(t, filepath.Join(ws, "edited.txt")); got.data != "edited\nmore\n" {
		t.Errorf("edited.txt after the second run = %q", got.data)
	}
}

// TestChangesConflict: a file the host changes after the guest wrote it
// is not overwritten by an apply: the conflict is reported and both
// versions are kept, until --force.
func TestChangesConflict(t *testing.T) {
	h := newHeld(t)
	ws := newWorkspace(t)
	writeOld(t, filepath.Join(ws, "c.txt"), "host 1\n", 0o644)
	settle()
	if code, _, errOut := h.run("run", "--changes", "review", "--workspace", ws, "--", "sh", "-c", `echo guest > /workspace/c.txt`); code != 0 {
		t.Fatalf("run: exit %d: %s", code, errOut)
	}
	if p := h.pending(ws); p["c.txt"].Conflict {
		t.Fatalf("c.txt conflicts before the host's edit: %+v", p)
	}
	if err := os.WriteFile(filepath.Join(ws, "c.txt"), []byte("host 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The listing shows the edit made after the pull, before any apply.
	if p := h.pending(ws); !p["c.txt"].Conflict {
		t.Errorf("airlock changes does not show the host's edit as a conflict: %+v", p)
	}
	code, out, errOut := h.run("apply", "--workspace", ws)
	if code == 0 || !strings.Contains(out, "conflict: c.txt") {
		t.Fatalf("apply over the host's edit: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if got, _ := stat(t, filepath.Join(ws, "c.txt")); got.data != "host 2\n" {
		t.Errorf("the host's edit was overwritten: %q", got.data)
	}
	// The guest's version stays pending beside the host's.
	if p := h.pending(ws); p["c.txt"].Kind != changes.Modified {
		t.Errorf("the guest's version is not kept: %+v", p)
	}
	if diff := h.must("diff", "--workspace", ws); !strings.Contains(diff, "+guest") || !strings.Contains(diff, "-host 2") {
		t.Errorf("diff of the conflict:\n%s", diff)
	}
	h.must("apply", "--force", "--workspace", ws, "c.txt")
	if got, _ := stat(t, filepath.Join(ws, "c.txt")); got.data != "guest\n" {
		t.Errorf("--force did not apply: %q", got.data)
	}
	h.must("undo", "--workspace", ws)
	if got, _ := stat(t, filepath.Join(ws, "c.txt")); got.data != "host 2\n" {
		t.Errorf("undo of --force did not bring the host's edit back: %q", got.data)
	}
}

// TestChangesService: through `airlock serve`, auto mode's writes are on
// the host when airlock run returns, and review mode holds them for
// airlock changes and apply; the task's own view is the held one.
func TestChangesService(t *testing.T) {
	root, err := os.MkdirTemp("", "airlock-serve-changes-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(root)
	ws := filepath.Join(root, "ws")
	os.Mkdir(ws, 0o755)
	ws = ownedByTaskUser(ws)
	s := startServe(t, root)
	defer func() { s.stop() }()
	if code, out, errOut := s.cli("", "workspace", "set", ws); code != 0 || !strings.Contains(out, "changes auto") {
		t.Fatalf("workspace set: %d %q %q", code, out, errOut)
	}
	if code, _, errOut := s.cli("", "run", "--", "sh", "-c", "echo auto > /workspace/a.txt"); code != 0 {
		t.Fatalf("run: %d %q", code, errOut)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "a.txt")); err != nil || string(b) != "auto\n" {
		t.Fatalf("a.txt on the host when airlock run returned: %q %v", b, err)
	}
	if code, out, errOut := s.cli("", "undo"); code != 0 || !strings.Contains(out, "undone") {
		t.Fatalf("undo: %d %q %q", code, out, errOut)
	}
	if _, err := os.Stat(filepath.Join(ws, "a.txt")); err == nil {
		t.Error("a.txt is still on the host after undo")
	}

	if code, out, errOut := s.cli("", "workspace", "set", "--changes", "review", ws); code != 0 || !strings.Contains(out, "changes review") {
		t.Fatalf("workspace set --changes review: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := s.cli("", "run", "--", "sh", "-c", "echo held > /workspace/r.txt; cat /workspace/r.txt"); code != 0 || out != "held\n" {
		t.Fatalf("run in review mode: %d %q %q", code, out, errOut)
	}
	if _, err := os.Stat(filepath.Join(ws, "r.txt")); err == nil {
		t.Fatal("r.txt reached the host in review mode")
	}
	code, out, errOut := s.cli("", "changes", "--json")
	var l service.ChangesList
	if code != 0 || json.Unmarshal([]byte(out), &l) != nil || l.Mode != changes.Review || len(l.Entries) != 1 || l.Entries[0].Path != "r.txt" {
		t.Fatalf("changes: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := s.cli("", "apply"); code != 0 || !strings.Contains(out, "applied 1") {
		t.Fatalf("apply: %d %q %q", code, out, errOut)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "r.txt")); err != nil || string(b) != "held\n" {
		t.Fatalf("r.txt after apply: %q %v", b, err)
	}
	// The running VM forgot what was applied: a change the host makes now
	// shows in the guest.
	os.WriteFile(filepath.Join(ws, "r.txt"), []byte("host\n"), 0o644)
	if code, out, _ := s.cli("", "run", "--", "cat", "/workspace/r.txt"); code != 0 || out != "host\n" {
		t.Errorf("the guest after apply and a host edit: %d %q", code, out)
	}
}

// TestChangesGuestNamesEscaped: the names a task gives its files reach
// the terminal only escaped, whether the store keeps or refuses them.
func TestChangesGuestNamesEscaped(t *testing.T) {
	h := newHeld(t)
	ws := newWorkspace(t)
	code, _, errOut := h.run("run", "--changes", "review", "--workspace", ws, "--", "sh", "-c",
		`cd /workspace && touch "$(printf 'clip\033]52;c;cm0gLXJmIH4=\007.txt')" "$(printf 'bidi\342\200\256txt.exe')" "$(printf 'c1\302\2332J.md')"`)
	if code != 0 {
		t.Fatalf("run: exit %d: %s", code, errOut)
	}
	outputs := map[string]string{"run's stderr": errOut}
	for _, args := range [][]string{{"changes"}, {"changes", "--json"}, {"apply"}, {"checkpoints"}} {
		_, out, errOut := h.run(append(args, "--workspace", ws)...)
		outputs["airlock "+strings.Join(args, " ")] = out + errOut
	}
	for what, out := range outputs {
		for _, r := range out {
			if r != '\n' && (r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0 || r == '\u202e') {
				t.Errorf("raw %U in %s: %q", r, what, out)
				break
			}
		}
	}
}
