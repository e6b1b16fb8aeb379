package changes

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
	"time"
)

// ent is one entry of a tar stream a test writes.
type ent struct {
	name string
	typ  byte // tar.TypeReg when 0
	body string
	mode int64 // 0o644 when 0
	link string
}

func file(name, body string) ent { return ent{name: name, body: body} }
func dir(name string) ent        { return ent{name: name + "/", typ: tar.TypeDir, mode: 0o755} }
func symlink(name, target string) ent {
	return ent{name: name, typ: tar.TypeSymlink, link: target, mode: 0o777}
}
func whiteout(dir, name string) ent {
	return file(filepath.ToSlash(filepath.Join(dir, ".wh."+name)), "")
}
func withMode(e ent, mode int64) ent    { e.mode = mode; return e }
func hardlink(name, target string) ent  { return ent{name: name, typ: tar.TypeLink, link: target} }
func special(name string, typ byte) ent { return ent{name: name, typ: typ} }

// layerTar writes entries as a tar stream.
func layerTar(t testing.TB, ents ...ent) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Linkname: e.link, ModTime: time.Unix(1e9, 0), Format: tar.FormatPAX}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if h.Typeflag == tar.TypeXGlobalHeader {
			h = &tar.Header{Typeflag: h.Typeflag, PAXRecords: map[string]string{"comment": "global"}}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// hostFile is a path in the test's workspace.
type hostFile struct {
	path, body, link string
	dir              bool
	mode             fs.FileMode
}

func hf(path, body string) hostFile { return hostFile{path: path, body: body} }

// workspace makes a folder holding files, and returns an epoch late
// enough that they count as changed before it (clockSlack).
func workspace(t testing.TB, files ...hostFile) (string, time.Time) {
	t.Helper()
	ws := t.TempDir()
	for _, f := range files {
		p := filepath.Join(ws, filepath.FromSlash(f.path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := f.mode
		if mode == 0 {
			mode = 0o644
		}
		var err error
		switch {
		case f.dir:
			err = os.Mkdir(p, 0o755)
		case f.link != "":
			err = os.Symlink(f.link, p)
		default:
			if err = os.WriteFile(p, []byte(f.body), mode); err == nil {
				err = os.Chmod(p, mode)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return ws, time.Now().Add(clockSlack)
}

func openStore(t testing.TB) *Store {
	t.Helper()
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func byPath(entries []Entry) map[string]Entry {
	m := map[string]Entry{}
	for _, e := range entries {
		m[e.Path] = e
	}
	return m
}

func TestIngest(t *testing.T) {
	for _, tc := range []struct {
		name    string
		host    []hostFile
		layer   []ent
		want    map[string]Kind // every record
		refused []string
		check   func(t *testing.T, got map[string]Entry)
	}{
		{
			name:  "added text file counts lines",
			layer: []ent{file("a.txt", "one\ntwo\n")},
			want:  map[string]Kind{"a.txt": Added},
			check: func(t *testing.T, got map[string]Entry) {
				if e := got["a.txt"]; !e.Text || e.LinesAdded != 2 || e.LinesRemoved != 0 || e.Size != 8 || e.Type != File {
					t.Errorf("a.txt = %+v", e)
				}
			},
		},
		{
			name:  "modified counts against the host",
			host:  []hostFile{hf("a.txt", "one\ntwo\nthree\n")},
			layer: []ent{file("a.txt", "one\n2\nthree\nfour\n")},
			want:  map[string]Kind{"a.txt": Modified},
			check: func(t *testing.T, got map[string]Entry) {
				if e := got["a.txt"]; !e.Text || e.LinesAdded != 2 || e.LinesRemoved != 1 {
					t.Errorf("a.txt = %+v", e)
				}
			},
		},
		{
			name:  "identical to the host is no change",
			host:  []hostFile{hf("a.txt", "same\n"), {path: "d", dir: true}},
			layer: []ent{dir("d"), file("a.txt", "same\n")},
			want:  map[string]Kind{},
		},
		{
			name:  "mode only",
			host:  []hostFile{hf("run.sh", "echo\n")},
			layer: []ent{withMode(file("run.sh", "echo\n"), 0o755)},
			want:  map[string]Kind{"run.sh": ModeOnly},
			check: func(t *testing.T, got map[string]Entry) {
				if e := got["run.sh"]; e.Mode != 0o755 {
					t.Errorf("mode %v", e.Mode)
				}
			},
		},
		{
			name:  "setuid, setgid and sticky dropped",
			layer: []ent{withMode(file("x", "x"), 0o7755)},
			want:  map[string]Kind{"x": Added},
			check: func(t *testing.T, got map[string]Entry) {
				if e := got["x"]; e.Mode != 0o755 {
					t.Errorf("mode %v", e.Mode)
				}
			},
		},
		{
			name:  "whiteouts: of a host path deleted, of none dropped",
			host:  []hostFile{hf("gone.txt", "a\nb\n")},
			layer: []ent{whiteout(".", "gone.txt"), whiteout(".", "never")},
			want:  map[string]Kind{"gone.txt": Deleted},
			check: func(t *testing.T, got map[string]Entry) {
				if e := got["gone.txt"]; e.Type != "" || !e.Text || e.LinesRemoved != 2 {
					t.Errorf("gone.txt = %+v", e)
				}
			},
		},
		{
			name:  "opaque folder hides the host's other children",
			host:  []hostFile{hf("d/keep", "k"), hf("d/hide", "h"), hf("d/sub/x", "x"), hf("other", "o")},
			layer: []ent{dir("d"), file("d/.wh..wh..opq", ""), file("d/keep", "k"), file("d/new", "n")},
			want:  map[string]Kind{"d/hide": Deleted, "d/sub": Deleted, "d/new": Added},
		},
		{
			name:  "a deleted and an added file of one content are a rename",
			host:  []hostFile{hf("old.txt", "hello\n"), hf("other.txt", "other\n"), hf("empty", "")},
			layer: []ent{whiteout(".", "old.txt"), file("new.txt", "hello\n"), whiteout(".", "other.txt"), whiteout(".", "empty"), file("empty2", "")},
			want:  map[string]Kind{"new.txt": Renamed, "other.txt": Deleted, "empty": Deleted, "empty2": Added},
			check: func(t *testing.T, got map[string]Entry) {
				if e := got["new.txt"]; e.From != "old.txt" || e.LinesAdded+e.LinesRemoved != 0 {
					t.Errorf("new.txt = %+v", e)
				}
			},
		},
		{
			name:  "paths the user's tools run on the host",
			host:  []hostFile{hf(".git/config", "[core]\n")},
			layer: []ent{file(".git/config", "[core]\n\tpager = evil\n"), file(".vscode/tasks.json", "{}"), file("src.go", "package x\n")},
			want:  map[string]Kind{".git/config": Modified, ".vscode/tasks.json": Added, "src.go": Added},
			check: func(t *testing.T, got map[string]Entry) {
				for p, want := range map[string]bool{".git/config": true, ".vscode/tasks.json": true, "src.go": false} {
					if got[p].HostRuns != want {
						t.Errorf("%s: HostRuns %v", p, got[p].HostRuns)
					}
				}
			},
		},
		{
			name:    "devices, fifos and unknown types refused",
			layer:   []ent{special("dev", tar.TypeChar), special("blk", tar.TypeBlock), special("fifo", tar.TypeFifo), special("odd", 'Z'), file("ok", "ok")},
			want:    map[string]Kind{"ok": Added},
			refused: []string{"blk", "dev", "fifo", "odd"},
		},
		{
			name: "symlinks kept only inside the workspace",
			layer: []ent{dir("d"), symlink("d/in", "../a"), symlink("d/up", "../../x"), symlink("abs", "/etc/passwd"),
				symlink("win", `C:\x`), symlink("empty", ""), symlink("through", "d/in/../.."), symlink("dot", "./d/../d")},
			want:    map[string]Kind{"d": Added, "d/in": Added},
			refused: []string{"abs", "d/up", "dot", "empty", "through", "win"},
			check: func(t *testing.T, got map[string]Entry) {
				if e := got["d/in"]; e.Type != Symlink || e.Link != "../a" {
					t.Errorf("d/in = %+v", e)
				}
			},
		},
		{
			name:  "a symlink as on the host is no change",
			host:  []hostFile{{path: "l", link: "a"}, {path: "m", link: "a"}},
			layer: []ent{symlink("l", "a"), symlink("m", "b")},
			want:  map[string]Kind{"m": Modified},
		},
		{
			name:    "hard links become copies",
			layer:   []ent{file("a", "data"), hardlink("b", "a"), hardlink("c", "missing")},
			want:    map[string]Kind{"a": Added, "b": Added},
			refused: []string{"c"},
			check: func(t *testing.T, got map[string]Entry) {
				if e := got["b"]; e.Type != File || e.Size != 4 {
					t.Errorf("b = %+v", e)
				}
			},
		},
		{
			name: "unsafe names refused",
			layer: []ent{file("../up", "x"), file("/abs", "x"), file("a/../b", "x"), file("a//b", "x"),
				file("esc\x1b[2J", "x"), file("bad\xff", "x"), file(`back\slash`, "x"),
				file("rtl\u202egnp.exe", "x"), whiteout(".", ".."), file("fine", "x")},
			want:    map[string]Kind{"fine": Added},
			refused: []string{"../up", "/abs", "a/../b", "a//b", "esc\\x1b[2J", "bad\\xff", `back\slash`, "rtl\\u202egnp.exe", ".."},
		},
		{
			name:    "a path twice is refused",
			layer:   []ent{file("twice", "a"), file("twice", "b"), file("once", "c")},
			want:    map[string]Kind{"once": Added},
			refused: []string{"twice"},
		},
		{
			name:    "a folder the host has as a symlink",
			host:    []hostFile{{path: "real", dir: true}, {path: "ln", link: "real"}},
			layer:   []ent{dir("ln"), file("ln/x", "x"), file("real/y", "y")},
			want:    map[string]Kind{"ln": Modified, "real/y": Added},
			refused: []string{"ln/x"},
		},
		{
			name:    "inside what the layer holds as no folder",
			layer:   []ent{file("f", "f"), file("f/x", "x"), symlink("l", "f"), file("l/y", "y"), whiteout(".", "w"), file("w/z", "z")},
			want:    map[string]Kind{"f": Added, "l": Added},
			refused: []string{"f/x", "l/y", "w/z"},
		},
		{
			name:  "an opaque folder below a host symlink hides nothing",
			host:  []hostFile{hf("real/sub/a", "a"), {path: "ln", link: "real"}},
			layer: []ent{file("ln/sub/.wh..wh..opq", "")},
			want:  map[string]Kind{},
		},
		{
			name:    "inside a refused folder",
			layer:   []ent{file("twice/a", "a"), dir("twice"), dir("twice"), file("twice/b", "b")},
			want:    map[string]Kind{},
			refused: []string{"twice", "twice/a", "twice/b"},
		},
		{
			name:  "binary is not text",
			host:  []hostFile{hf("img", "\x89PNG\x00\x01")},
			layer: []ent{file("img", "\x89PNG\x00\x02")},
			want:  map[string]Kind{"img": Modified},
			check: func(t *testing.T, got map[string]Entry) {
				if e := got["img"]; e.Text || e.LinesAdded != 0 {
					t.Errorf("img = %+v", e)
				}
			},
		},
		{
			name:  "text needs both sides",
			host:  []hostFile{hf("x", "\x00bin")},
			layer: []ent{file("x", "text\n")},
			want:  map[string]Kind{"x": Modified},
			check: func(t *testing.T, got map[string]Entry) {
				if got["x"].Text {
					t.Errorf("x = %+v", got["x"])
				}
			},
		},
		{
			name:  "tar's ./ prefix and folder slashes",
			layer: []ent{special("pax_global_header", tar.TypeXGlobalHeader), dir("./"), dir("./d"), file("./d/f", "f")},
			want:  map[string]Kind{"d": Added, "d/f": Added},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws, epoch := workspace(t, tc.host...)
			s := openStore(t)
			sum, err := s.Ingest(context.Background(), bytes.NewReader(layerTar(t, tc.layer...)), ws, epoch, Limits{})
			if err != nil {
				t.Fatal(err)
			}
			list, err := s.List(ws)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]Kind{}
			for _, e := range list {
				got[e.Path] = e.Kind
				if e.Conflict {
					t.Errorf("%s: conflict", e.Path)
				}
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("records %v, want %v", got, tc.want)
			}
			var refused []string
			for _, r := range sum.Refused {
				refused = append(refused, r.Path)
			}
			slices.Sort(refused)
			slices.Sort(tc.refused)
			if !slices.Equal(refused, tc.refused) {
				t.Errorf("refused %q, want %q (%+v)", refused, tc.refused, sum.Refused)
			}
			if sum.Pending != len(list) {
				t.Errorf("Summary.Pending %d, %d listed", sum.Pending, len(list))
			}
			if tc.check != nil {
				tc.check(t, byPath(list))
			}
		})
	}
}

// TestListShowsHostEditsSincePull: List re-reads the host's paths, so an
// edit the user makes after the pull shows as a conflict before any
// apply, as Apply then reports it; a deletion the user made too does not.
func TestListShowsHostEditsSincePull(t *testing.T) {
	ws, epoch := workspace(t, hf("edited", "one"), hf("quiet", "two"), hf("retimed", "three"),
		hf("gone", "four"), hf("old", "moved away"), hf("deleted", "five"), hf("untouched", "six"))
	s := openStore(t)
	layer := layerTar(t, file("edited", "guest 1"), file("quiet", "guest 2"), file("retimed", "guest 3"),
		whiteout("", "gone"), whiteout("", "old"), file("new", "moved away"), whiteout("", "deleted"), file("untouched", "guest 6"))
	if _, err := s.Ingest(context.Background(), bytes.NewReader(layer), ws, epoch, Limits{}); err != nil {
		t.Fatal(err)
	}
	list, err := s.List(ws)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range list {
		if e.Conflict {
			t.Fatalf("%s conflicts before any edit: %+v", e.Path, list)
		}
	}
	if e := byPath(list)["new"]; e.Kind != Renamed || e.From != "old" {
		t.Fatalf("new = %+v, want a rename from old", e)
	}

	// The user, after the pull: edits, edits keeping the size and the
	// modification time (only the ctime tells), deletes a file the guest
	// deleted too, edits a rename's old path and a file the guest deleted.
	host := func(p string) string { return filepath.Join(ws, p) }
	os.WriteFile(host("edited"), []byte("the user's one"), 0o644)
	fi, err := os.Stat(host("retimed"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(host("retimed"), []byte("THREE"), 0o644)
	os.Chtimes(host("retimed"), fi.ModTime(), fi.ModTime())
	os.Remove(host("gone"))
	os.WriteFile(host("old"), []byte("the user kept it"), 0o644)
	os.WriteFile(host("deleted"), []byte("the user's five"), 0o644)

	want := map[string]bool{"edited": true, "retimed": true, "new": true, "deleted": true}
	if changeTime(fi).IsZero() {
		delete(want, "retimed") // no ctime here: Apply's hash finds it
	}
	list, err = s.List(ws)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range list {
		if e.Conflict != want[e.Path] {
			t.Errorf("%s: Conflict = %v, want %v", e.Path, e.Conflict, want[e.Path])
		}
	}
	// Apply reads them the same way.
	res, err := s.Apply(ws, nil, ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want["retimed"] = true
	if got := slices.Sorted(maps.Keys(want)); !slices.Equal(res.Conflicts, got) {
		t.Errorf("Apply's conflicts %q, want %q", res.Conflicts, got)
	}
}
