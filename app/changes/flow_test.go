package changes

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func readWS(t *testing.T, ws, p string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(ws, filepath.FromSlash(p)))
	if err != nil {
		return "(" + err.Error() + ")"
	}
	return string(b)
}

// TestIngestApplyUndo runs the store as the product does: the guest's
// layer ingested, applied, changed again in the same layer (what Airlock
// itself wrote is no conflict), a user's edit (a conflict), two undos.
func TestIngestApplyUndo(t *testing.T) {
	ctx := context.Background()
	ws, epoch := workspace(t, hf("a.txt", "one"), hf("doomed/x", "x"), hf("keep.txt", "k"))
	s := openStore(t)
	ingest := func(ents ...ent) {
		t.Helper()
		if _, err := s.Ingest(ctx, bytes.NewReader(layerTar(t, ents...)), ws, epoch, Limits{}); err != nil {
			t.Fatal(err)
		}
	}
	ingest(file("a.txt", "two"), dir("new"), file("new/b.txt", "b"), whiteout("", "doomed"))
	res, err := s.Apply(ws, nil, ApplyOptions{Auto: true})
	if err != nil || len(res.Conflicts)+len(res.Refused) > 0 || len(res.Applied) != 4 {
		t.Fatalf("Apply = %+v, %v", res, err)
	}
	if readWS(t, ws, "a.txt") != "two" || readWS(t, ws, "new/b.txt") != "b" {
		t.Fatalf("after apply: %q %q", readWS(t, ws, "a.txt"), readWS(t, ws, "new/b.txt"))
	}
	if _, err := os.Stat(filepath.Join(ws, "doomed")); !os.IsNotExist(err) {
		t.Fatalf("doomed/: %v", err)
	}
	first := res.Checkpoint

	// The VM forgets the applied paths; the agent goes on in the same
	// layer and the user edits new/b.txt.
	forgot, _ := s.Forgotten()
	if !slices.Contains(forgot, "a.txt") {
		t.Fatalf("forget list %q", forgot)
	}
	s.ClearForgotten()
	os.WriteFile(filepath.Join(ws, "new", "b.txt"), []byte("the user's"), 0o644)
	ingest(file("a.txt", "three"), file("new/b.txt", "guest's b"))
	list, err := s.List(ws)
	if err != nil {
		t.Fatal(err)
	}
	got := byPath(list)
	if got["a.txt"].Conflict || !got["new/b.txt"].Conflict {
		t.Fatalf("conflicts: a.txt %v (Airlock wrote it), new/b.txt %v (the user did)", got["a.txt"].Conflict, got["new/b.txt"].Conflict)
	}
	res, err = s.Apply(ws, nil, ApplyOptions{Auto: true})
	if err != nil || !slices.Equal(res.Applied, []string{"a.txt"}) || !slices.Equal(res.Conflicts, []string{"new/b.txt"}) {
		t.Fatalf("second Apply = %+v, %v", res, err)
	}
	if readWS(t, ws, "a.txt") != "three" || readWS(t, ws, "new/b.txt") != "the user's" {
		t.Fatalf("after the second apply: %q %q", readWS(t, ws, "a.txt"), readWS(t, ws, "new/b.txt"))
	}

	if _, err := s.Undo(ws, ""); err != nil {
		t.Fatal(err)
	}
	if readWS(t, ws, "a.txt") != "two" {
		t.Fatalf("after the first undo: %q", readWS(t, ws, "a.txt"))
	}
	// new/b.txt is the user's now: undoing the first apply would remove
	// it, so it is refused, naming it.
	if _, err := s.Undo(ws, first); err == nil || !bytes.Contains([]byte(err.Error()), []byte("new/b.txt")) {
		t.Fatalf("Undo over the user's file: %v", err)
	}
	os.Remove(filepath.Join(ws, "new", "b.txt"))
	os.WriteFile(filepath.Join(ws, "new", "b.txt"), []byte("b"), 0o644)
	if _, err := s.Undo(ws, first); err == nil {
		t.Fatal("Undo over a file the user wrote again (same bytes, another time) went through")
	}
}

// TestApplyKeepsWhatTheUserAddsToADeletedFolder: the guest deleted a
// folder; the user then saved a new file in it on the host. The apply
// must not delete it with the folder.
func TestApplyKeepsWhatTheUserAddsToADeletedFolder(t *testing.T) {
	ws, epoch := workspace(t, hf("tree/a", "a"))
	s := openStore(t)
	if _, err := s.Ingest(context.Background(), bytes.NewReader(layerTar(t, whiteout("", "tree"))), ws, epoch, Limits{}); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(ws, "tree", "mine"), []byte("the user's"), 0o644)
	res, err := s.Apply(ws, nil, ApplyOptions{})
	if err != nil || !slices.Equal(res.Conflicts, []string{"tree"}) {
		t.Fatalf("Apply = %+v, %v", res, err)
	}
	if readWS(t, ws, "tree/mine") != "the user's" {
		t.Fatal("the user's file went with the folder")
	}
}
