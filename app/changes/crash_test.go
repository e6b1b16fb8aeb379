package changes

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/filelock"
)

// crashSpec tells TestCrashChild what to do and at which step to die.
type crashSpec struct {
	Op  string // "apply", "undo", "recover"
	Dir string
	WS  string
	ID  string
	N   int
}

const (
	crashEnv  = "AIRLOCK_CHANGES_CRASH"
	crashExit = 77
)

// TestCrashChild is not a test of its own: the crash tests run the test
// binary again with only it selected, to apply, undo or recover in a
// process that exits at once (no deferred cleanup, no unlock: the
// operating system drops the lock, as when a user kills Airlock) just
// before step N.
func TestCrashChild(t *testing.T) {
	env := os.Getenv(crashEnv)
	if env == "" {
		t.Skip("run by the crash tests")
	}
	var c crashSpec
	if err := json.Unmarshal([]byte(env), &c); err != nil {
		t.Fatal(err)
	}
	n := 0
	hook := func(op, p string) error {
		if n++; n == c.N {
			os.Exit(crashExit)
		}
		return nil
	}
	var err error
	if c.Op == "recover" {
		// Open with the hook in place before recovery runs.
		l, lerr := filelock.TryLock(filepath.Join(c.Dir, lockFile))
		if lerr != nil {
			t.Fatal(lerr)
		}
		s := &Store{dir: c.Dir, opts: Options{Limit: DefaultLimit}, lock: l, hook: hook}
		s.opts.Now = time.Now
		err = s.recover()
	} else {
		s, oerr := Open(c.Dir, Options{})
		if oerr != nil {
			t.Fatal(oerr)
		}
		s.hook = hook
		if c.Op == "apply" {
			_, err = s.Apply(c.WS, nil, ApplyOptions{})
		} else {
			_, err = s.Undo(c.WS, c.ID)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	os.Exit(0)
}

// runCrash runs TestCrashChild with c and says whether it died at step N
// (false: it finished first).
func runCrash(t *testing.T, c crashSpec) bool {
	t.Helper()
	spec, _ := json.Marshal(c)
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashEnv+"="+string(spec))
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return false
	case errors.As(err, &ee) && ee.ExitCode() == crashExit:
		return true
	}
	t.Fatalf("child %+v: %v\n%s", c, err, out)
	return false
}

// expectOldOrNew checks, after a recovering Open, that the workspace is
// entirely its old self with every change pending and no checkpoint, or
// entirely new with nothing pending and one checkpoint; it reports which.
func expectOldOrNew(t *testing.T, s *Store, ws string, old, new map[string]string, pending int) (isNew bool) {
	t.Helper()
	cur := snapshot(t, ws)
	cps, _, err := s.Checkpoints()
	if err != nil {
		t.Fatal(err)
	}
	p := pendingPaths(t, s)
	switch {
	case diffSnap(old, cur) == "":
		if len(p) != pending || len(cps) != 0 {
			t.Fatalf("folder is old, but pending %q, checkpoints %+v", p, cps)
		}
	case diffSnap(new, cur) == "":
		if len(p) != 0 || len(cps) != 1 || cps[0].Undone {
			t.Fatalf("folder is new, but pending %q, checkpoints %+v", p, cps)
		}
		isNew = true
	default:
		t.Fatalf("folder is neither old nor new:\nagainst old:\n%s\nagainst new:\n%s", diffSnap(old, cur), diffSnap(new, cur))
	}
	des, _ := os.ReadDir(filepath.Join(s.dir, checkpoints))
	if len(des) != len(cps) {
		t.Fatalf("checkpoint folders %v, checkpoints %+v", des, cps)
	}
	if _, err := os.Stat(filepath.Join(s.dir, journalFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("journal left after recovery: %v", err)
	}
	return isNew
}

// reference applies everyKind in a fresh workspace and returns the
// folder before and after.
func reference(t *testing.T) (old, new map[string]string) {
	t.Helper()
	ws := t.TempDir()
	s := openTestStore(t, t.TempDir(), Options{})
	everyKind(t, ws, s)
	old = snapshot(t, ws)
	if _, err := s.Apply(ws, nil, ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	return old, snapshot(t, ws)
}

// TestApplyKilledAtEveryStep kills an apply before each of its steps in
// turn (file writes, renames, removals, the journal, the store's
// bookkeeping) and opens the store again: the folder is all old (the
// changes pending) or all new (applied, with its checkpoint), never a mix.
func TestApplyKilledAtEveryStep(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the apply once a step in a child process")
	}
	old, new := reference(t)
	sawOld, sawNew := false, false
	for n := 1; ; n++ {
		ws, dir := t.TempDir(), t.TempDir()
		s := openTestStore(t, dir, Options{})
		everyKind(t, ws, s)
		s.Close()
		died := runCrash(t, crashSpec{Op: "apply", Dir: dir, WS: ws, N: n})
		s = openTestStore(t, dir, Options{})
		if expectOldOrNew(t, s, ws, old, new, 8) {
			sawNew = true
			// Undo works on a checkpoint a recovery completed.
			if _, err := s.Undo(ws, ""); err != nil {
				t.Fatalf("step %d: undo after recovery: %v", n, err)
			}
			if d := diffSnap(old, snapshot(t, ws)); d != "" {
				t.Fatalf("step %d: undo after recovery:\n%s", n, d)
			}
		} else {
			sawOld = true
		}
		s.Close()
		if !died {
			t.Logf("an apply takes %d steps", n-1)
			break
		}
	}
	if !sawOld || !sawNew {
		t.Fatalf("recoveries never rolled back (%v) or never forward (%v)", !sawOld, !sawNew)
	}
}

// TestRecoveryKilledAtEveryStep kills an apply half way through its
// renames, then kills the recovery that rolls it back at each step: the
// recovery after that still ends with the old folder.
func TestRecoveryKilledAtEveryStep(t *testing.T) {
	if testing.Short() {
		t.Skip("runs recovery once a step in a child process")
	}
	old, new := reference(t)
	// The step of the first rename: the folder is then half applied.
	renameStep := 0
	{
		ws := t.TempDir()
		s := openTestStore(t, t.TempDir(), Options{})
		everyKind(t, ws, s)
		n := 0
		s.hook = func(op, p string) error {
			n++
			if op == "rename" && renameStep == 0 {
				renameStep = n
			}
			return nil
		}
		if _, err := s.Apply(ws, nil, ApplyOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for m := 1; ; m++ {
		ws, dir := t.TempDir(), t.TempDir()
		s := openTestStore(t, dir, Options{})
		everyKind(t, ws, s)
		s.Close()
		if !runCrash(t, crashSpec{Op: "apply", Dir: dir, WS: ws, N: renameStep + 2}) {
			t.Fatal("the apply finished")
		}
		died := runCrash(t, crashSpec{Op: "recover", Dir: dir, WS: ws, N: m})
		s = openTestStore(t, dir, Options{})
		if expectOldOrNew(t, s, ws, old, new, 8) {
			t.Fatalf("recovery %d rolled forward an apply whose files were not done", m)
		}
		s.Close()
		if !died {
			t.Logf("a roll back takes %d steps", m-1)
			break
		}
	}
}

// TestUndoKilledAtEveryStep kills an undo before each step: the next
// start finishes it (or it had not begun).
func TestUndoKilledAtEveryStep(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the undo once a step in a child process")
	}
	old, new := reference(t)
	for n := 1; ; n++ {
		ws, dir := t.TempDir(), t.TempDir()
		s := openTestStore(t, dir, Options{})
		everyKind(t, ws, s)
		res, err := s.Apply(ws, nil, ApplyOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		died := runCrash(t, crashSpec{Op: "undo", Dir: dir, WS: ws, ID: res.Checkpoint, N: n})
		s = openTestStore(t, dir, Options{})
		cps, _, err := s.Checkpoints()
		if err != nil || len(cps) != 1 {
			t.Fatalf("step %d: checkpoints %+v, %v", n, cps, err)
		}
		want := new
		if cps[0].Undone {
			want = old
		}
		if d := diffSnap(want, snapshot(t, ws)); d != "" {
			t.Fatalf("step %d: undone=%v:\n%s", n, cps[0].Undone, d)
		}
		if !cps[0].Undone {
			if _, err := s.Undo(ws, ""); err != nil {
				t.Fatalf("step %d: undo again: %v", n, err)
			}
		}
		if _, err := os.Stat(filepath.Join(dir, checkpoints, res.Checkpoint, blobsDir)); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("step %d: an undone checkpoint keeps its blobs: %v", n, err)
		}
		s.Close()
		if !died {
			t.Logf("an undo takes %d steps", n-1)
			break
		}
	}
}

// TestApplyDiskFullAtEveryStep fails each step of an apply in turn with
// ENOSPC: the apply reports it, the folder is as it was (or, past the
// point where the journal says the files are done, the next start
// finishes it), and the store stays consistent.
func TestApplyDiskFullAtEveryStep(t *testing.T) {
	old, new := reference(t)
	for n := 1; ; n++ {
		ws, dir := t.TempDir(), t.TempDir()
		s, err := Open(dir, Options{})
		if err != nil {
			t.Fatal(err)
		}
		everyKind(t, ws, s)
		i, failed := 0, false
		s.hook = func(op, p string) error {
			if i++; i == n {
				failed = true
				return fmt.Errorf("%s %s: %w", op, p, syscall.ENOSPC)
			}
			return nil
		}
		_, err = s.Apply(ws, nil, ApplyOptions{})
		if failed != (err != nil) {
			t.Fatalf("step %d: failed %v, Apply: %v", n, failed, err)
		}
		if err != nil && !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("step %d: %v, want ENOSPC", n, err)
		}
		s.Close()
		s = openTestStore(t, dir, Options{})
		isNew := expectOldOrNew(t, s, ws, old, new, 8)
		if err != nil && isNew {
			if _, jerr := os.Stat(filepath.Join(dir, journalFile)); jerr == nil {
				t.Fatalf("step %d: journal left", n)
			}
		}
		s.Close()
		if !failed {
			break
		}
	}
}

// TestRollBackComparesBytes: a guest can give its file the host file's
// size, mode and time; a roll back must still see the bytes differ.
func TestRollBackComparesBytes(t *testing.T) {
	ws := t.TempDir()
	s := openTestStore(t, t.TempDir(), Options{})
	makeHost(t, ws, wsFile{"f", "AAAA", 0o644}, wsFile{"g", "g", 0o644})
	rec := fileRec(t, ws, "f", "BBBB", 0o644)
	rec.ModTime = oldTime
	setPending(t, s, []string{"BBBB", "h"}, rec, fileRec(t, ws, "g", "h", 0o644))
	renamed, failed := false, false
	s.hook = func(op, p string) error {
		if renamed && op == "rename" && !failed {
			failed = true
			return syscall.ENOSPC
		}
		renamed = renamed || (op == "rename" && p == "f")
		return nil
	}
	if _, err := s.Apply(ws, nil, ApplyOptions{}); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Apply: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "f")); string(b) != "AAAA" {
		t.Fatalf("f = %q after the roll back", b)
	}
}

// TestRecoveryWaitsForTheFolder: an apply killed half way in a folder
// that is then gone (an unplugged disk) keeps the store closed with a
// message saying why, and rolls back once the folder is back.
func TestRecoveryWaitsForTheFolder(t *testing.T) {
	old, _ := reference(t)
	ws, dir := t.TempDir(), t.TempDir()
	s := openTestStore(t, dir, Options{})
	everyKind(t, ws, s)
	s.Close()
	if !runCrash(t, crashSpec{Op: "apply", Dir: dir, WS: ws, N: 20}) {
		t.Fatal("the apply finished")
	}
	if err := os.Rename(ws, ws+".away"); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir, Options{}); err == nil || !strings.Contains(err.Error(), "cannot be completed until the folder is there again") {
		t.Fatalf("Open without the folder: %v", err)
	}
	if err := os.Rename(ws+".away", ws); err != nil {
		t.Fatal(err)
	}
	s = openTestStore(t, dir, Options{})
	if d := diffSnap(old, snapshot(t, ws)); d != "" {
		t.Fatalf("not rolled back:\n%s", d)
	}
}
