package changes

import (
	"archive/tar"
	"bytes"
	"context"
	"math/rand/v2"
	"slices"
	"testing"
)

// FuzzIngest feeds Ingest garbage and mutated layers: it never panics, a
// failed Ingest leaves the pending changes as they were, and the store
// stays readable.
func FuzzIngest(f *testing.F) {
	seeds := [][]ent{
		{file("a", "a\n"), dir("d"), file("d/b", "b"), symlink("d/l", "../a"), hardlink("h", "a")},
		{dir("d"), file("d/.wh..wh..opq", ""), whiteout(".", "keep"), file("new", "keep\n")},
		{file("../x", "x"), special("dev", tar.TypeChar), file("a", "1"), file("a", "2")},
	}
	// Mutations of each seed run with every go test, not only under
	// -fuzz: truncations and flipped bytes, from a fixed source.
	r := rand.New(rand.NewPCG(32, 1))
	for _, s := range seeds {
		b := layerTar(f, s...)
		f.Add(b)
		for range 16 {
			m := bytes.Clone(b)
			for range 1 + r.IntN(4) {
				m[r.IntN(len(m))] = byte(r.IntN(256))
			}
			f.Add(m)
			f.Add(b[:r.IntN(len(b))])
		}
	}
	f.Add([]byte("garbage"))
	f.Add([]byte{})
	ws, epoch := workspace(f, hf("keep", "keep\n"), hf("d/x", "x"), hf("a", "host\n"), hostFile{path: "ln", link: "d"})
	before := layerTar(f, file("pending", "p"))
	lim := Limits{Entries: 64, Bytes: 1 << 16, NameBytes: 256}

	f.Fuzz(func(t *testing.T, stream []byte) {
		s, err := Open(t.TempDir(), Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		ctx := context.Background()
		if _, err := s.Ingest(ctx, bytes.NewReader(before), ws, epoch, lim); err != nil {
			t.Fatal(err)
		}
		want, _ := s.List(ws)
		_, err = s.Ingest(ctx, bytes.NewReader(stream), ws, epoch, lim)
		got, lerr := s.List(ws)
		if lerr != nil {
			t.Fatalf("List after Ingest: %v", lerr)
		}
		if err != nil && !slices.Equal(got, want) {
			t.Fatalf("failed Ingest (%v) changed the pending set: %+v", err, got)
		}
		for _, e := range got {
			if badName(e.Path) != "" {
				t.Fatalf("stored name %q", e.Path)
			}
			if e.Type == Symlink && badLink(e.Path, e.Link) != "" {
				t.Fatalf("stored link %q -> %q", e.Path, e.Link)
			}
			if e.Type == File {
				rc, _, err := s.Content(e.Path)
				if err != nil {
					t.Fatalf("Content(%q): %v", e.Path, err)
				}
				rc.Close()
			}
		}
		if err := s.Diff(ws, nil, &bytes.Buffer{}); err != nil {
			t.Fatalf("Diff: %v", err)
		}
	})
}
