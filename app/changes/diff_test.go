package changes

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// ingested returns a store holding the layer's changes to the workspace.
func ingested(t *testing.T, host []hostFile, layer ...ent) (*Store, string) {
	t.Helper()
	ws, epoch := workspace(t, host...)
	s := openStore(t)
	sum, err := s.Ingest(context.Background(), bytes.NewReader(layerTar(t, layer...)), ws, epoch, Limits{})
	if err != nil || len(sum.Refused) > 0 {
		t.Fatalf("Ingest: %+v, %v", sum, err)
	}
	return s, ws
}

func TestDiff(t *testing.T) {
	big := strings.Repeat("line\n", maxDiffBytes/5+1)
	for _, tc := range []struct {
		name  string
		host  []hostFile
		layer []ent
		want  string
	}{
		{
			name:  "modified text",
			host:  []hostFile{hf("a.txt", "one\ntwo\nthree\n")},
			layer: []ent{file("a.txt", "one\n2\nthree\n")},
			want:  "diff --git a/a.txt b/a.txt\n--- a/a.txt\n+++ b/a.txt\n@@ -1,3 +1,3 @@\n one\n-two\n+2\n three\n",
		},
		{
			name:  "added against empty",
			layer: []ent{file("new", "x\n")},
			want:  "diff --git a/new b/new\nnew file mode 100644\n--- /dev/null\n+++ b/new\n@@ -0,0 +1 @@\n+x\n",
		},
		{
			name:  "deleted against empty",
			host:  []hostFile{hf("gone", "x\n")},
			layer: []ent{whiteout(".", "gone")},
			want:  "diff --git a/gone b/gone\ndeleted file mode 100644\n--- a/gone\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n",
		},
		{
			name:  "mode",
			host:  []hostFile{hf("run", "x\n")},
			layer: []ent{withMode(file("run", "x\n"), 0o755)},
			want:  "diff --git a/run b/run\nold mode 100644\nnew mode 100755\n",
		},
		{
			name:  "rename",
			host:  []hostFile{hf("old", "x\n")},
			layer: []ent{whiteout(".", "old"), file("new", "x\n")},
			want:  "diff --git a/old b/new\nrename from old\nrename to new\n",
		},
		{
			name:  "binary",
			host:  []hostFile{hf("img", "\x00"+strings.Repeat("a", 1199999))},
			layer: []ent{file("img", "\x00"+strings.Repeat("b", 1299999))},
			want:  "diff --git a/img b/img\nBinary files a/img and b/img differ (1.2 MB -> 1.3 MB)\n",
		},
		{
			name:  "text too large to diff",
			layer: []ent{file("big.log", big)},
			want:  "diff --git a/big.log b/big.log\nnew file mode 100644\nBinary files /dev/null and b/big.log differ (0 B -> 1.0 MB)\n",
		},
		{
			name:  "a terminal's controls escaped, tabs kept",
			layer: []ent{file("t", "\tok\x1b]52;c;evil\x07\n")},
			want:  "diff --git a/t b/t\nnew file mode 100644\n--- /dev/null\n+++ b/t\n@@ -0,0 +1 @@\n+\tok\\x1b]52;c;evil\\a\n",
		},
		{
			name:  "symlink target",
			layer: []ent{symlink("l", "a")},
			want:  "diff --git a/l b/l\nnew file mode 120000\n--- /dev/null\n+++ b/l\n@@ -0,0 +1 @@\n+a\n\\ No newline at end of file\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, ws := ingested(t, tc.host, tc.layer...)
			var buf bytes.Buffer
			if err := s.Diff(ws, nil, &buf); err != nil {
				t.Fatal(err)
			}
			if buf.String() != tc.want {
				t.Errorf("Diff:\n%s\nwant:\n%s", buf.String(), tc.want)
			}
		})
	}
}

func TestDiffPaths(t *testing.T) {
	s, ws := ingested(t, nil, file("a", "a\n"), dir("d"), file("d/b", "b\n"))
	var buf bytes.Buffer
	if err := s.Diff(ws, []string{"d"}, &buf); err != nil {
		t.Fatal(err)
	}
	if out := buf.String(); strings.Contains(out, "a/a ") || !strings.Contains(out, "+++ b/d/b") {
		t.Errorf("Diff d:\n%s", out)
	}
	if err := s.Diff(ws, []string{"nothing"}, io.Discard); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Diff of no change: %v", err)
	}
}

func TestContent(t *testing.T) {
	s, _ := ingested(t, []hostFile{hf("gone", "g")}, file("a", "data"), hardlink("b", "a"), whiteout(".", "gone"), dir("d"))
	for _, p := range []string{"a", "b"} {
		rc, e, err := s.Content(p)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(rc)
		rc.Close()
		if string(b) != "data" || e.Path != p {
			t.Errorf("Content(%s) = %q, %+v", p, b, e)
		}
	}
	for _, p := range []string{"gone", "d", "none"} {
		if _, _, err := s.Content(p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Content(%s): %v", p, err)
		}
	}
}

func TestDiscard(t *testing.T) {
	s, ws := ingested(t, []hostFile{hf("old", "same"), hf("keep", "k")},
		whiteout(".", "old"), file("new", "same"), file("a", "a"), file("b", "b"))
	got, err := s.Discard([]string{"new", "a"})
	if err != nil || !slices.Equal(got, []string{"a", "new"}) {
		t.Fatalf("Discard = %q, %v", got, err)
	}
	if f, _ := s.Forgotten(); !slices.Equal(f, []string{"a", "new", "old"}) {
		t.Errorf("Forgotten = %q", f)
	}
	if list, _ := s.List(ws); len(list) != 1 || list[0].Path != "b" {
		t.Errorf("left %+v", list)
	}
	// Only b's blob is left ("same" and "a" went with their records).
	if _, blobs := storeFiles(t, s); !slices.Equal(blobs, []string{hashOf("b")}) {
		t.Errorf("blobs %q", blobs)
	}
	if got, err := s.Discard(nil); err != nil || !slices.Equal(got, []string{"b"}) {
		t.Errorf("Discard all = %q, %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(s.dir, pendingDir, blobsDir, hashOf("b"))); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("b's blob: %v", err)
	}
}

func TestHumanBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 999: "999 B", 1000: "1.0 kB", 1_250_000: "1.2 MB", 8 << 30: "8.6 GB"} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestIsText(t *testing.T) {
	cut := strings.Repeat("a", sniffBytes-1) + "é" // the cut splits é
	for s, want := range map[string]bool{"": true, "plain\n": true, "caf\u00e9": true, "nul\x00": false, "\xff\xfe": false,
		cut: true, strings.Repeat("a", sniffBytes) + "\x00": true} {
		if got := isText([]byte(s)); got != want {
			t.Errorf("isText(%.20q) = %v", s, got)
		}
	}
}
