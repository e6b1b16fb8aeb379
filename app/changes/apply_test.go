package changes

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// Times with nanoseconds, which ext4, APFS and NTFS (100 ns) keep.
var (
	oldTime = time.Unix(1_700_000_000, 123_456_789)
	newTime = time.Unix(1_710_000_000, 987_654_300)
)

// wsFile is a file a test puts in the workspace.
type wsFile struct {
	path, content string
	mode          fs.FileMode
}

// makeHost writes files into ws with oldTime as their time.
func makeHost(t *testing.T, ws string, files ...wsFile) {
	t.Helper()
	for _, f := range files {
		p := filepath.Join(ws, filepath.FromSlash(f.path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f.content), 0o600); err != nil {
			t.Fatal(err)
		}
		mode := f.mode
		if mode == 0 {
			mode = 0o644
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, oldTime, oldTime); err != nil {
			t.Fatal(err)
		}
	}
}

// baseOf reads the host path as Ingest would record it.
func baseOf(t *testing.T, ws, p string) Base {
	t.Helper()
	fi, err := os.Lstat(filepath.Join(ws, filepath.FromSlash(p)))
	if notExist(err) {
		return Base{}
	}
	if err != nil {
		t.Fatal(err)
	}
	typ, _ := typeOf(fi.Mode())
	b := Base{Exists: true, Type: typ, Mode: fi.Mode().Perm(), ModTime: fi.ModTime()}
	if typ == File {
		data, _ := os.ReadFile(filepath.Join(ws, filepath.FromSlash(p)))
		b.Size, b.Hash = fi.Size(), sha(data)
	}
	return b
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// fileRec is a pending file change with content, against the host's path
// as it is now.
func fileRec(t *testing.T, ws, p, content string, mode fs.FileMode) record {
	b := baseOf(t, ws, p)
	k := Added
	if b.Exists {
		k = Modified
	}
	return record{
		Entry: Entry{Path: p, Kind: k, Type: File, Mode: mode, Size: int64(len(content)), ModTime: newTime},
		Blob:  sha([]byte(content)), Base: b,
	}
}

// setPending writes the pending set as Ingest would: blobs (contents by
// hash) and the manifest.
func setPending(t *testing.T, s *Store, contents []string, recs ...record) {
	t.Helper()
	for _, c := range contents {
		if err := os.WriteFile(s.blobPath(sha([]byte(c))), []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The layer began once the test had set the host up: later host
	// changes conflict.
	epoch := time.Now().Add(clockSlack + time.Second)
	if err := s.savePending(pendingManifest{Epoch: epoch, Records: recs}); err != nil {
		t.Fatal(err)
	}
}

func pendingPaths(t *testing.T, s *Store) []string {
	t.Helper()
	m, err := s.loadPending()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range m.Records {
		out = append(out, r.Path)
	}
	slices.Sort(out)
	return out
}

// snapshot is a workspace as the tests compare it: path -> "type mode
// mtime content/target".
func snapshot(t *testing.T, ws string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(ws, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(ws, p)
		if rel == "." {
			return nil
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		desc := fi.Mode().String()
		switch {
		case fi.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			desc += " " + fi.ModTime().UTC().Format(time.RFC3339Nano) + " " + string(b)
		case fi.Mode()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			desc += " -> " + l
		}
		out[filepath.ToSlash(rel)] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func diffSnap(a, b map[string]string) string {
	var out []string
	for k, v := range a {
		if b[k] != v {
			out = append(out, k+": "+v+" | "+b[k])
		}
	}
	for k, v := range b {
		if _, ok := a[k]; !ok {
			out = append(out, k+": (none) | "+v)
		}
	}
	slices.Sort(out)
	return strings.Join(out, "\n")
}

func openTestStore(t *testing.T, dir string, opts Options) *Store {
	t.Helper()
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// everyKind sets up a workspace and a pending set with one change of each
// kind, and returns the contents the records name.
func everyKind(t *testing.T, ws string, s *Store) {
	t.Helper()
	makeHost(t, ws,
		wsFile{"keep.txt", "untouched\n", 0o644},
		wsFile{"mod.txt", "old content\n", 0o640},
		wsFile{"gone.txt", "delete me\n", 0o600},
		wsFile{"tree/a.txt", "a\n", 0o644},
		wsFile{"tree/sub/b.bin", "b\x00b", 0o755},
		wsFile{"old-name.txt", "renamed\n", 0o644},
		wsFile{"script.sh", "#!/bin/sh\n", 0o644},
	)
	os.Chtimes(filepath.Join(ws, "tree", "sub"), oldTime, oldTime)
	os.Chtimes(filepath.Join(ws, "tree"), oldTime, oldTime)
	os.Chtimes(ws, oldTime, oldTime)
	deleted := func(p string) record {
		return record{Entry: Entry{Path: p, Kind: Deleted}, Base: baseOf(t, ws, p)}
	}
	ren := fileRec(t, ws, "new-name.txt", "renamed\n", 0o644)
	ren.Kind, ren.From = Renamed, "old-name.txt"
	setPending(t, s, []string{"new file\n", "new content\n", "renamed\n"},
		fileRec(t, ws, "added/deep/new.txt", "new file\n", 0o644),
		record{Entry: Entry{Path: "added", Kind: Added, Type: Dir, Mode: 0o750, ModTime: newTime}},
		fileRec(t, ws, "mod.txt", "new content\n", 0o644),
		deleted("gone.txt"),
		deleted("tree"),
		ren,
		record{Entry: Entry{Path: "script.sh", Kind: ModeOnly, Type: File, Mode: 0o755}, Base: baseOf(t, ws, "script.sh")},
		record{Entry: Entry{Path: "link", Kind: Added, Type: Symlink, Link: "added/deep/new.txt"}},
	)
}

func TestApplyAndUndoEveryKind(t *testing.T) {
	ws, dir := t.TempDir(), t.TempDir()
	s := openTestStore(t, dir, Options{})
	everyKind(t, ws, s)
	before := snapshot(t, ws)
	wsTime := func() time.Time { fi, _ := os.Stat(ws); return fi.ModTime() }
	res, err := s.Apply(ws, nil, ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Refused) > 0 || len(res.Conflicts) > 0 || len(res.Applied) != 8 || res.Checkpoint == "" {
		t.Fatalf("Apply = %+v", res)
	}
	after := snapshot(t, ws)
	want := map[string]string{
		"keep.txt":           "-rw-r--r-- " + oldTime.UTC().Format(time.RFC3339Nano) + " untouched\n",
		"mod.txt":            "-rw-r--r-- " + newTime.UTC().Format(time.RFC3339Nano) + " new content\n",
		"new-name.txt":       "-rw-r--r-- " + newTime.UTC().Format(time.RFC3339Nano) + " renamed\n",
		"script.sh":          "-rwxr-xr-x " + oldTime.UTC().Format(time.RFC3339Nano) + " #!/bin/sh\n",
		"added":              "drwxr-x---",
		"added/deep":         "drwxr-xr-x",
		"added/deep/new.txt": "-rw-r--r-- " + newTime.UTC().Format(time.RFC3339Nano) + " new file\n",
		"link":               "Lrwxrwxrwx -> added/deep/new.txt",
	}
	if d := diffSnap(want, after); d != "" {
		t.Fatalf("after apply (want | got):\n%s", d)
	}
	if fi, _ := os.Stat(filepath.Join(ws, "added")); !fi.ModTime().Equal(newTime) {
		t.Errorf("added/ time %v, want %v", fi.ModTime(), newTime)
	}
	if p := pendingPaths(t, s); len(p) != 0 {
		t.Errorf("still pending: %q", p)
	}
	if des, _ := os.ReadDir(filepath.Join(dir, pendingDir, blobsDir)); len(des) != 0 {
		t.Errorf("pending blobs left: %v", des)
	}
	forgot, _ := s.Forgotten()
	for _, p := range []string{"added/deep/new.txt", "old-name.txt", "new-name.txt", "tree"} {
		if !slices.Contains(forgot, p) {
			t.Errorf("forget list %q lacks %s", forgot, p)
		}
	}
	cps, u, err := s.Checkpoints()
	if err != nil || len(cps) != 1 {
		t.Fatalf("Checkpoints = %+v, %v", cps, err)
	}
	if got := cps[0].Summary; got != "3 added, 1 modified, 2 deleted, 1 renamed, 1 mode changed" {
		t.Errorf("Summary = %q", got)
	}
	// The previous versions kept: mod.txt, gone.txt, tree's two files,
	// old-name.txt (script.sh's content stays where it is).
	if want := int64(len("old content\n") + len("delete me\n") + 2 + 3 + len("renamed\n")); cps[0].Bytes != want {
		t.Errorf("Bytes = %d, want %d", cps[0].Bytes, want)
	}
	if u.CheckpointBytes < cps[0].Bytes || u.LimitBytes != DefaultLimit {
		t.Errorf("Usage = %+v", u)
	}

	cp, err := s.Undo(ws, "")
	if err != nil {
		t.Fatal(err)
	}
	if !cp.Undone || cp.ID != res.Checkpoint {
		t.Errorf("Undo = %+v", cp)
	}
	if d := diffSnap(before, snapshot(t, ws)); d != "" {
		t.Fatalf("after undo (want | got):\n%s", d)
	}
	for _, p := range []string{"tree", "tree/sub"} {
		if fi, _ := os.Stat(filepath.Join(ws, p)); !fi.ModTime().Equal(oldTime) {
			t.Errorf("%s time %v, want %v", p, fi.ModTime(), oldTime)
		}
	}
	if !wsTime().Equal(oldTime) {
		t.Errorf("workspace time %v, want %v", wsTime(), oldTime)
	}
	if _, err := s.Undo(ws, res.Checkpoint); !errors.Is(err, ErrUndone) {
		t.Errorf("second Undo: %v, want ErrUndone", err)
	}
	if _, err := s.Undo(ws, ""); err == nil || !strings.Contains(err.Error(), "no checkpoint to undo") {
		t.Errorf("Undo with none left: %v", err)
	}
	cps, _, _ = s.Checkpoints()
	if len(cps) != 1 || !cps[0].Undone || cps[0].Bytes != 0 {
		t.Errorf("after undo: %+v", cps)
	}
}

func TestApplyOnlyPathsGiven(t *testing.T) {
	ws, dir := t.TempDir(), t.TempDir()
	s := openTestStore(t, dir, Options{})
	setPending(t, s, []string{"1", "2", "3"},
		fileRec(t, ws, "a/1", "1", 0o644), fileRec(t, ws, "a/2", "2", 0o644), fileRec(t, ws, "b", "3", 0o644))
	res, err := s.Apply(ws, []string{"a", "nope"}, ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Applied, []string{"a/1", "a/2"}) || len(res.Refused) != 1 || res.Refused[0].Path != "nope" {
		t.Fatalf("Apply = %+v", res)
	}
	if p := pendingPaths(t, s); !slices.Equal(p, []string{"b"}) {
		t.Fatalf("pending %q", p)
	}
	if _, err := os.Stat(filepath.Join(dir, pendingDir, blobsDir, sha([]byte("3")))); err != nil {
		t.Errorf("the blob of what stays pending went: %v", err)
	}
}

func TestApplyRefuses(t *testing.T) {
	outside := t.TempDir()
	ws := t.TempDir()
	makeHost(t, ws, wsFile{"inside/x", "x", 0o644}, wsFile{"plainfile", "p", 0o644})
	if err := os.Symlink(outside, filepath.Join(ws, "out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("inside", filepath.Join(ws, "in")); err != nil {
		t.Fatal(err)
	}
	good := func(p string) record {
		return record{Entry: Entry{Path: p, Kind: Added, Type: File, Mode: 0o644, Size: 1, ModTime: newTime}, Blob: sha([]byte("z"))}
	}
	long := strings.Repeat("a", 256)
	cases := []struct {
		name string
		rec  record
		goos string
		want string
	}{
		{"dotdot", good("../escape"), "linux", `".."`},
		{"dotdot inside", good("a/../../escape"), "linux", `".."`},
		{"absolute", good("/tmp/escape"), "linux", "absolute"},
		{"drive", good("C:/escape"), "windows", "cannot hold"},
		{"backslash", good(`a\..\..\x`), "linux", "backslash"},
		{"windows device", good("a/nul.txt"), "windows", "device"},
		{"windows trailing dot", good("a/x."), "windows", "trailing dot"},
		{"windows stream", good("a/x:stream"), "windows", "cannot hold"},
		{"long element", good(long), "linux", "longer than 255"},
		{"control character", good("a\x1b[2Jb"), "linux", "control characters"},
		{"long path", good(strings.Repeat("abcdefg/", 600) + "x"), "linux", "longer than 4096"},
		{"unclean", good("a//b"), "linux", "not clean"},
		{"parent symlink out", good("out/planted"), "linux", "symlink on the host"},
		{"parent symlink in", good("in/planted"), "linux", "symlink on the host"},
		{"parent is a file", good("plainfile/x"), "linux", "not a folder"},
		{"symlink outside", record{Entry: Entry{Path: "l", Kind: Added, Type: Symlink, Link: "../../etc/passwd"}}, "linux", "outside"},
		{"symlink absolute", record{Entry: Entry{Path: "l", Kind: Added, Type: Symlink, Link: "/etc/passwd"}}, "linux", "absolute"},
		{"symlink through a name", record{Entry: Entry{Path: "l", Kind: Added, Type: Symlink, Link: "sub/../x"}}, "linux", `".." after a name`},
		{"fifo", record{Entry: Entry{Path: "f", Kind: Added, Type: "fifo"}}, "linux", "never created"},
		{"device", record{Entry: Entry{Path: "d", Kind: Added, Type: "device"}}, "linux", "never created"},
		{"blob name", record{Entry: Entry{Path: "b", Kind: Added, Type: File}, Blob: "../../../etc/passwd"}, "linux", "no content"},
		{"rename from outside", func() record { r := good("r"); r.Kind, r.From = Renamed, "../x"; return r }(), "linux", `".."`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := openTestStore(t, t.TempDir(), Options{})
			setPending(t, s, []string{"z"}, c.rec)
			root, err := os.OpenRoot(ws)
			if err != nil {
				t.Fatal(err)
			}
			defer root.Close()
			var res ApplyResult
			if take := s.choose(root, pendingManifest{Records: []record{c.rec}}, nil, ApplyOptions{Force: true}, c.goos, false, &res); len(take) != 0 {
				t.Fatalf("chose %+v", take)
			}
			if len(res.Refused) != 1 || !strings.Contains(res.Refused[0].Reason, c.want) {
				t.Fatalf("Refused = %+v, want a reason with %q", res.Refused, c.want)
			}
			if p := res.Refused[0].Path; strings.ContainsRune(p, 0x1b) {
				t.Fatalf("Refused path %q reaches a terminal unescaped", p)
			}
			if c.goos != "linux" {
				return
			}
			res, err = s.Apply(ws, nil, ApplyOptions{Force: true})
			if err != nil || len(res.Refused) != 1 || res.Checkpoint != "" {
				t.Fatalf("Apply = %+v, %v", res, err)
			}
			if p := pendingPaths(t, s); len(p) != 1 {
				t.Errorf("refused change left the pending set: %q", p)
			}
			if des, _ := os.ReadDir(outside); len(des) != 0 {
				t.Errorf("written outside: %v", des)
			}
		})
	}
}

func TestApplyRefusesCaseFolds(t *testing.T) {
	ws := t.TempDir()
	s := openTestStore(t, t.TempDir(), Options{})
	recs := []record{fileRec(t, ws, "Read.me", "1", 0o644), fileRec(t, ws, "read.ME", "2", 0o644), fileRec(t, ws, "caf\u00e9", "3", 0o644), fileRec(t, ws, "cafe\u0301", "4", 0o644), fileRec(t, ws, "other", "5", 0o644)}
	root, _ := os.OpenRoot(ws)
	defer root.Close()
	for folds, want := range map[bool]int{true: 4, false: 0} {
		var res ApplyResult
		take := s.choose(root, pendingManifest{Epoch: time.Now(), Records: recs}, nil, ApplyOptions{}, "linux", folds, &res)
		if len(res.Refused) != want || len(take) != 5-want {
			t.Errorf("folds %v: refused %+v, took %d", folds, res.Refused, len(take))
		}
	}
}

func TestApplyModesAndTypes(t *testing.T) {
	ws := t.TempDir()
	s := openTestStore(t, t.TempDir(), Options{})
	makeHost(t, ws, wsFile{"was-file", "f", 0o644})
	if err := os.MkdirAll(filepath.Join(ws, "was-dir", "child"), 0o755); err != nil {
		t.Fatal(err)
	}
	makeHost(t, ws, wsFile{"was-dir/child/f", "in dir", 0o644})
	setuid := fileRec(t, ws, "suid", "s", 0o755|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)
	toDir := record{Entry: Entry{Path: "was-file", Kind: Modified, Type: Dir, Mode: 0o755, ModTime: newTime}, Base: baseOf(t, ws, "was-file")}
	inNewDir := fileRec(t, ws, "was-file/inside", "i", 0o600)
	toFile := fileRec(t, ws, "was-dir", "now a file", 0o644)
	setPending(t, s, []string{"s", "i", "now a file"}, setuid, toDir, inNewDir, toFile)
	before := snapshot(t, ws)
	res, err := s.Apply(ws, nil, ApplyOptions{})
	if err != nil || len(res.Applied) != 4 {
		t.Fatalf("Apply = %+v, %v", res, err)
	}
	fi, err := os.Lstat(filepath.Join(ws, "suid"))
	if err != nil || fi.Mode() != 0o755 {
		t.Errorf("suid: %v %v, want -rwxr-xr-x", fi.Mode(), err)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "was-file", "inside")); string(b) != "i" {
		t.Errorf("was-file/inside = %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "was-dir")); string(b) != "now a file" {
		t.Errorf("was-dir = %q", b)
	}
	if _, err := s.Undo(ws, res.Checkpoint); err != nil {
		t.Fatal(err)
	}
	if d := diffSnap(before, snapshot(t, ws)); d != "" {
		t.Fatalf("after undo (want | got):\n%s", d)
	}
}

func TestApplyConflicts(t *testing.T) {
	ws := t.TempDir()
	s := openTestStore(t, t.TempDir(), Options{})
	makeHost(t, ws, wsFile{"user.txt", "the user's first\n", 0o644}, wsFile{"other.txt", "o", 0o644})
	rec := fileRec(t, ws, "user.txt", "the guest's\n", 0o644)
	flagged := fileRec(t, ws, "flagged.txt", "f", 0o644)
	flagged.Conflict = true
	hostRuns := fileRec(t, ws, ".envrc", "export X=1", 0o644)
	hostRuns.HostRuns = true
	setPending(t, s, []string{"the guest's\n", "f", "export X=1"}, rec, flagged, hostRuns)

	// The user edits the file after the guest saw it: same size, the
	// same time even, other bytes.
	p := filepath.Join(ws, "user.txt")
	os.WriteFile(p, []byte("the user's edit!\n"), 0o644)
	os.Chtimes(p, oldTime, oldTime)

	res, err := s.Apply(ws, nil, ApplyOptions{Auto: true})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Conflicts, []string{"flagged.txt", "user.txt"}) || len(res.Refused) != 1 || res.Refused[0].Path != ".envrc" || len(res.Applied) != 0 {
		t.Fatalf("Auto Apply = %+v", res)
	}
	res, err = s.Apply(ws, nil, ApplyOptions{})
	if err != nil || !slices.Equal(res.Conflicts, []string{"flagged.txt", "user.txt"}) || !slices.Equal(res.Applied, []string{".envrc"}) {
		t.Fatalf("Apply = %+v, %v", res, err)
	}
	if b, _ := os.ReadFile(p); string(b) != "the user's edit!\n" {
		t.Fatalf("the user's file was overwritten: %q", b)
	}
	if got := pendingPaths(t, s); !slices.Equal(got, []string{"flagged.txt", "user.txt"}) {
		t.Fatalf("pending %q", got)
	}
	if _, err := os.Stat(s.blobPath(rec.Blob)); err != nil {
		t.Fatalf("the guest's version went: %v", err)
	}
	res, err = s.Apply(ws, []string{"user.txt"}, ApplyOptions{Force: true, Auto: true})
	if err != nil || len(res.Applied) != 0 {
		t.Fatalf("Auto ignores Force: %+v, %v", res, err)
	}
	res, err = s.Apply(ws, []string{"user.txt"}, ApplyOptions{Force: true})
	if err != nil || !slices.Equal(res.Applied, []string{"user.txt"}) {
		t.Fatalf("forced Apply = %+v, %v", res, err)
	}
	if b, _ := os.ReadFile(p); string(b) != "the guest's\n" {
		t.Fatalf("forced: %q", b)
	}
	if _, err := s.Undo(ws, ""); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "the user's edit!\n" {
		t.Fatalf("undo of the forced apply: %q", b)
	}
}

func TestUndoRefusesChangedPaths(t *testing.T) {
	ws := t.TempDir()
	s := openTestStore(t, t.TempDir(), Options{})
	makeHost(t, ws, wsFile{"f", "old", 0o644})
	setPending(t, s, []string{"new", "n2"}, fileRec(t, ws, "f", "new", 0o644), fileRec(t, ws, "dir/n", "n2", 0o644))
	res, err := s.Apply(ws, nil, ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// An edit in place that keeps the size and the time.
	os.WriteFile(filepath.Join(ws, "f"), []byte("NEW"), 0o644)
	os.Chtimes(filepath.Join(ws, "f"), newTime, newTime)
	if _, err := s.Undo(ws, res.Checkpoint); !errors.Is(err, ErrChangedSince) {
		t.Fatalf("Undo over a same-size, same-time edit: %v", err)
	}
	os.WriteFile(filepath.Join(ws, "f"), []byte("the user's"), 0o644)
	os.WriteFile(filepath.Join(ws, "dir", "mine"), []byte("the user's too"), 0o644)
	_, err = s.Undo(ws, res.Checkpoint)
	if !errors.Is(err, ErrChangedSince) || !strings.Contains(err.Error(), "dir/mine, f changed") {
		t.Fatalf("Undo: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "f")); string(b) != "the user's" {
		t.Fatalf("f = %q", b)
	}
	// Moving the user's files away lets the undo through.
	os.Remove(filepath.Join(ws, "dir", "mine"))
	os.Rename(filepath.Join(ws, "f"), filepath.Join(ws, "f.mine"))
	if _, err := s.Undo(ws, res.Checkpoint); !errors.Is(err, ErrChangedSince) {
		t.Fatalf("Undo with f missing: %v", err)
	}
	makeHost(t, ws, wsFile{"f", "new", 0o644})
	os.Chtimes(filepath.Join(ws, "f"), newTime, newTime)
	if _, err := s.Undo(ws, res.Checkpoint); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "f")); string(b) != "old" {
		t.Fatalf("f = %q", b)
	}
	if _, err := os.Stat(filepath.Join(ws, "dir")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("dir/ left: %v", err)
	}
}

func TestCheckpointsBound(t *testing.T) {
	ws := t.TempDir()
	s := openTestStore(t, t.TempDir(), Options{Limit: 25000})
	big := strings.Repeat("x", 10000)
	var ids []string
	for i := range 4 {
		makeHost(t, ws, wsFile{"f", big, 0o644})
		other := strings.Repeat(string(rune('a'+i)), 10000)
		setPending(t, s, []string{other, "keep"}, fileRec(t, ws, "f", other, 0o644), fileRec(t, ws, "p", "keep", 0o644))
		res, err := s.Apply(ws, []string{"f"}, ApplyOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.Checkpoint)
	}
	cps, u, err := s.Checkpoints()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range cps {
		got = append(got, c.ID)
	}
	// Each checkpoint keeps 10,000 bytes and its manifest: two fit.
	if !slices.Equal(got, []string{ids[3], ids[2]}) {
		t.Fatalf("checkpoints %q, want the newest two of %q", got, ids)
	}
	if u.PendingBytes+u.CheckpointBytes > 25000 || u.PendingBytes == 0 {
		t.Fatalf("usage %+v", u)
	}
	if p := pendingPaths(t, s); !slices.Equal(p, []string{"p"}) {
		t.Fatalf("pending %q", p)
	}
}

// TestApplyFolderReplaced: the guest deleted a folder and made it again
// (an opaque folder in its layer), and deleted a file the user deleted
// too.
func TestApplyFolderReplaced(t *testing.T) {
	ws := t.TempDir()
	s := openTestStore(t, t.TempDir(), Options{})
	makeHost(t, ws, wsFile{"tree/old", "old", 0o644}, wsFile{"tree/kept", "kept", 0o644}, wsFile{"both-gone", "x", 0o644})
	gone := record{Entry: Entry{Path: "both-gone", Kind: Deleted}, Base: baseOf(t, ws, "both-gone")}
	os.Remove(filepath.Join(ws, "both-gone"))
	setPending(t, s, []string{"new", "kept2"},
		record{Entry: Entry{Path: "tree", Kind: Deleted}, Base: baseOf(t, ws, "tree")},
		fileRec(t, ws, "tree/new", "new", 0o644), fileRec(t, ws, "tree/kept", "kept2", 0o644), gone)
	before := snapshot(t, ws)
	res, err := s.Apply(ws, nil, ApplyOptions{})
	if err != nil || len(res.Applied) != 4 {
		t.Fatalf("Apply = %+v, %v", res, err)
	}
	got := snapshot(t, ws)
	if _, ok := got["tree/old"]; ok || !strings.HasSuffix(got["tree/new"], " new") || !strings.HasSuffix(got["tree/kept"], " kept2") {
		t.Fatalf("after apply: %q", got)
	}
	if _, err := s.Undo(ws, ""); err != nil {
		t.Fatal(err)
	}
	if d := diffSnap(before, snapshot(t, ws)); d != "" {
		t.Fatalf("after undo:\n%s", d)
	}
}

// TestUndoRefusesSymlinkedParent: a folder that held an applied file is
// replaced by a symlink to a copy of it elsewhere in the folder; undo
// would write through the link, so it refuses.
func TestUndoRefusesSymlinkedParent(t *testing.T) {
	ws := t.TempDir()
	s := openTestStore(t, t.TempDir(), Options{})
	makeHost(t, ws, wsFile{"pre/g", "old g", 0o644})
	setPending(t, s, []string{"new g"}, fileRec(t, ws, "pre/g", "new g", 0o644))
	res, err := s.Apply(ws, nil, ApplyOptions{})
	if err != nil || len(res.Applied) != 1 {
		t.Fatalf("Apply = %+v, %v", res, err)
	}
	if err := os.Rename(filepath.Join(ws, "pre"), filepath.Join(ws, "elsewhere")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("elsewhere", filepath.Join(ws, "pre")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Undo(ws, res.Checkpoint); !errors.Is(err, ErrChangedSince) || !strings.Contains(err.Error(), "pre/g") {
		t.Fatalf("Undo through a symlinked folder: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "elsewhere", "g")); string(b) != "new g" {
		t.Fatalf("written through the link: %q", b)
	}
}

// TestApplyKeepsByLinkOnlyASoleName: the previous version of a file with
// one name is kept by a hard link (no bytes copied); one with another name
// elsewhere is copied, since a write through that name would change what
// Undo restores.
func TestApplyKeepsByLinkOnlyASoleName(t *testing.T) {
	ws := t.TempDir()
	s := openTestStore(t, t.TempDir(), Options{})
	makeHost(t, ws, wsFile{"sole", "old sole", 0o644}, wsFile{"shared", "old shared", 0o644})
	if err := os.Link(filepath.Join(ws, "shared"), filepath.Join(ws, "other-name")); err != nil {
		t.Fatal(err)
	}
	soleFI, _ := os.Lstat(filepath.Join(ws, "sole"))
	setPending(t, s, []string{"new sole", "new shared"}, fileRec(t, ws, "sole", "new sole", 0o644), fileRec(t, ws, "shared", "new shared", 0o644))
	res, err := s.Apply(ws, nil, ApplyOptions{})
	if err != nil || len(res.Applied) != 2 {
		t.Fatalf("Apply = %+v, %v", res, err)
	}
	cp, err := s.loadCheckpoint(res.Checkpoint)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range cp.Before {
		if b.Path == "sole" {
			kept, err := os.Lstat(filepath.Join(s.cpDir(cp.ID), blobsDir, b.Blob))
			if err != nil || (linkCount(soleFI) != 0 && !os.SameFile(soleFI, kept)) {
				t.Errorf("sole's previous version was copied, not linked: %v", err)
			}
		}
	}
	// Written in place through its other name: the old inode changes.
	if err := os.WriteFile(filepath.Join(ws, "other-name"), []byte("written through the other name"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Undo(ws, res.Checkpoint); err != nil {
		t.Fatal(err)
	}
	if got := readWS(t, ws, "shared"); got != "old shared" {
		t.Fatalf("undo restored %q, want the version the apply replaced", got)
	}
	if got := readWS(t, ws, "sole"); got != "old sole" {
		t.Fatalf("sole = %q", got)
	}
}

// TestUndoRefusesAKeptVersionWrittenSince: a program that had a file
// open keeps writing to the version the apply replaced, which the
// checkpoint holds by a link; Undo says so rather than restore half.
func TestUndoRefusesAKeptVersionWrittenSince(t *testing.T) {
	ws := t.TempDir()
	s := openTestStore(t, t.TempDir(), Options{})
	makeHost(t, ws, wsFile{"log", "line 1\n", 0o644}, wsFile{"other", "o", 0o644})
	f, err := os.OpenFile(filepath.Join(ws, "log"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	setPending(t, s, []string{"guest's log\n", "o2"}, fileRec(t, ws, "log", "guest's log\n", 0o644), fileRec(t, ws, "other", "o2", 0o644))
	res, err := s.Apply(ws, nil, ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("line 2\n")
	_, err = s.Undo(ws, res.Checkpoint)
	if fi, _ := os.Lstat(filepath.Join(ws, "log")); linkCount(fi) == 0 {
		return // kept by a copy here: the write went nowhere
	}
	if err == nil || !strings.Contains(err.Error(), "a program that had the file open") {
		t.Fatalf("Undo: %v", err)
	}
	if got := readWS(t, ws, "other"); got != "o2" {
		t.Fatalf("a refused undo restored other: %q", got)
	}
}
