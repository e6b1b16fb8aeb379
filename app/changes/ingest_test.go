package changes

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// storeFiles returns the pending manifest's bytes and the blobs' names.
func storeFiles(t *testing.T, s *Store) (string, []string) {
	t.Helper()
	m, err := os.ReadFile(filepath.Join(s.dir, pendingDir, manifestFile))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	des, err := os.ReadDir(s.blobPath(""))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	return string(m), names
}

func TestIngestBrokenStreamKeepsPending(t *testing.T) {
	ws, epoch := workspace(t, hf("a.txt", "old\n"))
	s := openStore(t)
	good := layerTar(t, file("a.txt", "new\n"), file("b", "b"))
	if _, err := s.Ingest(context.Background(), bytes.NewReader(good), ws, epoch, Limits{}); err != nil {
		t.Fatal(err)
	}
	wantList, _ := s.List(ws)
	wantManifest, wantBlobs := storeFiles(t, s)
	if len(wantList) != 2 || len(wantBlobs) != 2 {
		t.Fatalf("first ingest: %+v, blobs %q", wantList, wantBlobs)
	}

	full := layerTar(t, file("c", "a blob that is written before the break"), file("d", strings.Repeat("d", 2000)))
	longer := layerTar(t, file("x", "AAAA"), file("y", "y"))
	i := bytes.Index(longer, []byte("AAAA")) + 4
	longer = slices.Concat(longer[:i], bytes.Repeat([]byte("B"), 600), longer[i:])
	canceled, cancel := context.WithCancel(context.Background())
	cancel()

	for _, tc := range []struct {
		name   string
		stream []byte
		lim    Limits
		ctx    context.Context
	}{
		{name: "garbage", stream: []byte("this is not a tar stream at all, but it is long enough to be read as a header block? no." + strings.Repeat("x", 600))},
		{name: "a file shorter than it said", stream: full[:len(full)-1024-500]},
		{name: "a file longer than it said", stream: longer},
		{name: "too many entries", stream: layerTar(t, file("c", "c"), file("d", "d"), file("e", "e")), lim: Limits{Entries: 2}},
		{name: "too many bytes", stream: layerTar(t, file("c", "12345"), file("d", "123456")), lim: Limits{Bytes: 10}},
		{name: "a name too long", stream: layerTar(t, file("c", "c"), file("0123456789a", "d")), lim: Limits{NameBytes: 10}},
		{name: "a link too long", stream: layerTar(t, file("c", "c"), symlink("l", "0123456789a")), lim: Limits{NameBytes: 10}},
		{name: "an element too long", stream: layerTar(t, file("c", "c"), file("d/"+strings.Repeat("e", 256), "d"))},
		{name: "canceled", stream: good, ctx: canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := tc.ctx
			if ctx == nil {
				ctx = context.Background()
			}
			_, err := s.Ingest(ctx, bytes.NewReader(tc.stream), ws, epoch, tc.lim)
			if err == nil {
				t.Fatal("Ingest: no error")
			}
			if tc.ctx == nil && !errors.Is(err, ErrLayer) {
				t.Errorf("error %v is not ErrLayer", err)
			}
			if got, _ := s.List(ws); !slices.Equal(got, wantList) {
				t.Errorf("pending after: %+v", got)
			}
			if m, blobs := storeFiles(t, s); m != wantManifest || !slices.Equal(blobs, wantBlobs) {
				t.Errorf("store after: blobs %q, want %q", blobs, wantBlobs)
			}
		})
	}
}

func hashOf(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// conflicted returns the Conflict flags Ingest stored, and checks that
// List, which re-reads the host (workspace ws), agrees while the host is
// as Ingest found it.
func conflicted(t *testing.T, s *Store, ws string) map[string]bool {
	t.Helper()
	m, err := s.loadPending()
	if err != nil {
		t.Fatal(err)
	}
	stored := map[string]bool{}
	for _, r := range m.Records {
		stored[r.Path] = r.Conflict
	}
	list, err := s.List(ws)
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, e := range list {
		listed[e.Path] = e.Conflict
	}
	if !maps.Equal(stored, listed) {
		t.Errorf("List's conflicts %v, Ingest's %v", listed, stored)
	}
	return stored
}

func TestIngestConflicts(t *testing.T) {
	ctx := context.Background()
	// write changes a host file after the epoch (past the file system's
	// coarse clock).
	write := func(t *testing.T, ws, p, body string) {
		t.Helper()
		time.Sleep(20 * time.Millisecond)
		if err := os.WriteFile(filepath.Join(ws, p), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	layer := layerTar(t, file("a.txt", "guest\n"), file("b.txt", "guest\n"), whiteout(".", "d"))

	t.Run("edited after the epoch", func(t *testing.T) {
		ws, epoch := workspace(t, hf("a.txt", "host\n"), hf("b.txt", "host\n"), hf("d/x", "x"))
		write(t, ws, "a.txt", "user's edit\n")
		s := openStore(t)
		if _, err := s.Ingest(ctx, bytes.NewReader(layer), ws, epoch, Limits{}); err != nil {
			t.Fatal(err)
		}
		if got := conflicted(t, s, ws); !got["a.txt"] || got["b.txt"] || got["d"] {
			t.Errorf("conflicts %v", got)
		}
	})
	t.Run("a file below a deleted folder edited after the epoch", func(t *testing.T) {
		ws, epoch := workspace(t, hf("a.txt", "host\n"), hf("b.txt", "host\n"), hf("d/x", "x"))
		time.Sleep(20 * time.Millisecond)
		f, err := os.OpenFile(filepath.Join(ws, "d", "x"), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString("more")
		f.Close()
		s := openStore(t)
		if _, err := s.Ingest(ctx, bytes.NewReader(layer), ws, epoch, Limits{}); err != nil {
			t.Fatal(err)
		}
		if got := conflicted(t, s, ws); !got["d"] || got["a.txt"] {
			t.Errorf("conflicts %v", got)
		}
	})
	t.Run("mtime set back, ctime not", func(t *testing.T) {
		if runtime.GOOS != "linux" && runtime.GOOS != "darwin" {
			t.Skip("no ctime")
		}
		ws, epoch := workspace(t, hf("a.txt", "host\n"), hf("b.txt", "host\n"), hf("d/x", "x"))
		fi, _ := os.Stat(filepath.Join(ws, "a.txt"))
		write(t, ws, "a.txt", "user's edit\n")
		if err := os.Chtimes(filepath.Join(ws, "a.txt"), fi.ModTime(), fi.ModTime()); err != nil {
			t.Fatal(err)
		}
		s := openStore(t)
		if _, err := s.Ingest(ctx, bytes.NewReader(layer), ws, epoch, Limits{}); err != nil {
			t.Fatal(err)
		}
		if got := conflicted(t, s, ws); !got["a.txt"] || got["b.txt"] {
			t.Errorf("conflicts %v", got)
		}
	})
	t.Run("edited just before the epoch, within the clock's slack", func(t *testing.T) {
		ws, _ := workspace(t, hf("a.txt", "host\n"), hf("b.txt", "host\n"), hf("d/x", "x"))
		write(t, ws, "a.txt", "user's edit\n")
		s := openStore(t)
		if _, err := s.Ingest(ctx, bytes.NewReader(layer), ws, time.Now().Add(clockSlack/2), Limits{}); err != nil {
			t.Fatal(err)
		}
		if got := conflicted(t, s, ws); !got["a.txt"] {
			t.Errorf("conflicts %v", got)
		}
	})
	t.Run("what Airlock wrote after the epoch", func(t *testing.T) {
		ws, epoch := workspace(t, hf("a.txt", "host\n"), hf("b.txt", "host\n"), hf("d/x", "x"))
		s := openStore(t)
		// As Apply leaves a.txt, once the epoch has passed.
		write(t, ws, "a.txt", "applied\n")
		root, _ := os.OpenRoot(ws)
		defer root.Close()
		m, _ := s.loadPending()
		m.Epoch = epoch
		if err := m.noteWritten(root, "a.txt", hashOf("applied\n")); err != nil {
			t.Fatal(err)
		}
		s.savePending(m)
		if _, err := s.Ingest(ctx, bytes.NewReader(layer), ws, epoch, Limits{}); err != nil {
			t.Fatal(err)
		}
		if got := conflicted(t, s, ws); got["a.txt"] {
			t.Errorf("Airlock's own write conflicts: %v", got)
		}
		// The user's edit after it does, even one that only its ctime
		// tells (same bytes, mtime set back).
		fi, _ := os.Stat(filepath.Join(ws, "a.txt"))
		write(t, ws, "a.txt", "applied\n")
		if runtime.GOOS == "linux" || runtime.GOOS == "darwin" {
			os.Chtimes(filepath.Join(ws, "a.txt"), fi.ModTime(), fi.ModTime())
		}
		if _, err := s.Ingest(ctx, bytes.NewReader(layer), ws, epoch, Limits{}); err != nil {
			t.Fatal(err)
		}
		if got := conflicted(t, s, ws); !got["a.txt"] {
			t.Errorf("the user's edit after Airlock's: %v", got)
		}
	})
	t.Run("a pending path keeps its base", func(t *testing.T) {
		ws, epoch := workspace(t, hf("a.txt", "host\n"), hf("b.txt", "host\n"), hf("d/x", "x"))
		s := openStore(t)
		if _, err := s.Ingest(ctx, bytes.NewReader(layer), ws, epoch, Limits{}); err != nil {
			t.Fatal(err)
		}
		if got := conflicted(t, s, ws); got["a.txt"] || got["b.txt"] || got["d"] {
			t.Fatalf("first ingest: conflicts %v", got)
		}
		write(t, ws, "a.txt", "user's edit\n")
		// A later epoch than the edit: only the kept base tells.
		if _, err := s.Ingest(ctx, bytes.NewReader(layer), ws, time.Now().Add(clockSlack+time.Second), Limits{}); err != nil {
			t.Fatal(err)
		}
		if got := conflicted(t, s, ws); !got["a.txt"] || got["b.txt"] {
			t.Errorf("conflicts %v", got)
		}
		m, _ := s.loadPending()
		if m.Records[0].Path != "a.txt" || m.Records[0].Base.Hash != hashOf("host\n") {
			t.Errorf("base %+v", m.Records[0])
		}
	})
	t.Run("a rename's old path edited", func(t *testing.T) {
		ws, epoch := workspace(t, hf("old", "same"))
		s := openStore(t)
		rename := layerTar(t, whiteout(".", "old"), file("new", "same"))
		if _, err := s.Ingest(ctx, bytes.NewReader(rename), ws, epoch, Limits{}); err != nil {
			t.Fatal(err)
		}
		if got := conflicted(t, s, ws); len(got) != 1 || got["new"] {
			t.Fatalf("first ingest: %v", got)
		}
		// Touched, same content: still the rename, which now conflicts.
		time.Sleep(20 * time.Millisecond)
		now := time.Now()
		if err := os.Chtimes(filepath.Join(ws, "old"), now, now); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Ingest(ctx, bytes.NewReader(rename), ws, epoch, Limits{}); err != nil {
			t.Fatal(err)
		}
		if got := conflicted(t, s, ws); len(got) != 1 || !got["new"] {
			t.Errorf("conflicts %v", got)
		}
	})
}

func TestIngestFoldedNames(t *testing.T) {
	layer := layerTar(t, file("README", "a"), file("readme", "b"), file("caf\u00e9", "c"), file("cafe\u0301", "d"), file("other", "e"))
	for goos, want := range map[string][]string{
		"linux":  {"README", "cafe\u0301", "caf\u00e9", "other", "readme"},
		"darwin": {"other"},
	} {
		t.Run(goos, func(t *testing.T) {
			ws, epoch := workspace(t)
			s := openStore(t)
			sum, err := s.ingest(context.Background(), bytes.NewReader(layer), ws, epoch, Limits{}, goos)
			if err != nil {
				t.Fatal(err)
			}
			list, _ := s.List(ws)
			var got []string
			for _, e := range list {
				got = append(got, e.Path)
			}
			if !slices.Equal(got, want) {
				t.Errorf("pending %q, want %q (refused %+v)", got, want, sum.Refused)
			}
		})
	}
}

func TestIngestWindowsNames(t *testing.T) {
	layer := layerTar(t, file("a:b", "ads"), file("d/con.txt", "dev"), file("lpt1", "dev"), file("x.", "dot"), file("y ", "space"),
		file("q?", "q"), file("ok.txt", "ok"), file("com10", "not a device"))
	for goos, want := range map[string][]string{
		"linux":   {"a:b", "com10", "d/con.txt", "lpt1", "ok.txt", "q?", "x.", "y "},
		"windows": {"com10", "ok.txt"},
	} {
		t.Run(goos, func(t *testing.T) {
			ws, epoch := workspace(t)
			s := openStore(t)
			sum, err := s.ingest(context.Background(), bytes.NewReader(layer), ws, epoch, Limits{}, goos)
			if err != nil {
				t.Fatal(err)
			}
			list, _ := s.List(ws)
			var got []string
			for _, e := range list {
				got = append(got, e.Path)
			}
			if !slices.Equal(got, want) {
				t.Errorf("pending %q, want %q (refused %+v)", got, want, sum.Refused)
			}
		})
	}
}

func TestFoldsNames(t *testing.T) {
	ws, _ := workspace(t, hf("Makefile", ""))
	root, err := os.OpenRoot(ws)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	// This test's temporary folder is case-sensitive on Linux.
	if got := foldsNames(root, ws); got != false && runtime.GOOS == "linux" {
		t.Errorf("foldsNames = %v", got)
	}
	// The probe tells the same file under another name from another file.
	os.WriteFile(filepath.Join(ws, "mAKEFILE"), nil, 0o644)
	if foldsNames(root, ws) {
		t.Error("two files taken for one")
	}
}

func TestIngestSkipsForgotten(t *testing.T) {
	ws, epoch := workspace(t)
	s := openStore(t)
	layer := layerTar(t, file("a", "a"), dir("d"), file("d/b", "b"), file("c", "c"))
	ingest := func() []string {
		t.Helper()
		if _, err := s.Ingest(context.Background(), bytes.NewReader(layer), ws, epoch, Limits{}); err != nil {
			t.Fatal(err)
		}
		list, _ := s.List(ws)
		var paths []string
		for _, e := range list {
			paths = append(paths, e.Path)
		}
		return paths
	}
	if got := ingest(); !slices.Equal(got, []string{"a", "c", "d", "d/b"}) {
		t.Fatalf("pending %q", got)
	}
	if got, err := s.Discard([]string{"a", "d"}); err != nil || !slices.Equal(got, []string{"a", "d", "d/b"}) {
		t.Fatalf("Discard = %q, %v", got, err)
	}
	// The layer still holds them until the guest forgets.
	if got := ingest(); !slices.Equal(got, []string{"c"}) {
		t.Errorf("pending after discard %q", got)
	}
}
