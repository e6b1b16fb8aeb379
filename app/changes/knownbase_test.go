package changes

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestApplyKnowsUnchangedFilesByIdentity: Ingest records the identity
// (inode, change time) of a host file last changed before the clock's
// slack, and Apply takes such a file's hash unread while it holds; a
// rewrite in place that keeps the size and the modification time moves
// the change time, so Apply reads the file again and reports the
// conflict. A file changed within the slack gets no identity.
func TestApplyKnowsUnchangedFilesByIdentity(t *testing.T) {
	if _, ctime := identity(statOf(t, t.TempDir())); ctime == 0 {
		t.Skip("no inode and change time here: Apply reads every file")
	}
	ws, epoch := workspace(t, hf("same.txt", "old same\n"), hf("edited.txt", "old edit\n"))
	time.Sleep(clockSlack + 100*time.Millisecond)
	if err := os.WriteFile(filepath.Join(ws, "fresh.txt"), []byte("old fresh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	epoch = time.Now().Add(clockSlack)
	s := openStore(t)
	layer := layerTar(t, file("same.txt", "guest same\n"), file("edited.txt", "guest edit\n"), file("fresh.txt", "guest fresh\n"))
	if _, err := s.Ingest(context.Background(), bytes.NewReader(layer), ws, epoch, Limits{}); err != nil {
		t.Fatal(err)
	}
	m, err := s.loadPending()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range m.Records {
		if got, want := r.Base.Ino != 0, r.Path != "fresh.txt"; got != want {
			t.Errorf("%s: identity recorded %v, want %v (%+v)", r.Path, got, want, r.Base)
		}
	}

	// The user rewrites edited.txt in place: same size, mtime set back.
	p := filepath.Join(ws, "edited.txt")
	fi := statOf(t, p)
	if err := os.WriteFile(p, []byte("new edit\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(ws)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	for _, r := range m.Records {
		now, err := knownBase(root, r.Path, r.Base)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(filepath.Join(ws, r.Path))
		if now.Hash != sha(b) {
			t.Errorf("%s: knownBase hash %s, the file's %s", r.Path, now.Hash, sha(b))
		}
	}
	res, err := s.Apply(ws, nil, ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Conflicts, []string{"edited.txt"}) || !slices.Equal(res.Applied, []string{"fresh.txt", "same.txt"}) {
		t.Errorf("Apply = %+v, want edited.txt a conflict and the rest applied", res)
	}
}

func statOf(t *testing.T, p string) os.FileInfo {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi
}
