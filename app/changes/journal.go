package changes

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/airlock-sandbox/airlock/internal/atomicfile"
)

// Journal operations.
const (
	opApply = "apply"
	opUndo  = "undo"
)

// journal is journal.json: an apply or undo under way. It is written
// (synced) after the checkpoint holds every previous version and before
// the first host file changes, and removed once the store is up to date.
type journal struct {
	Op         string `json:"op"`
	Checkpoint string `json:"checkpoint"`
	Workspace  string `json:"workspace"`
	// FilesDone says every host file of an apply is in its new state:
	// only the store's bookkeeping remains.
	FilesDone bool `json:"files_done,omitempty"`
}

func (s *Store) step(op, p string) error {
	if s.hook == nil {
		return nil
	}
	return s.hook(op, p)
}

func (s *Store) writeJournal(j journal) error {
	if err := s.step("journal", j.Op); err != nil {
		return err
	}
	b, err := json.Marshal(j)
	if err == nil {
		err = atomicfile.Write(filepath.Join(s.dir, journalFile), b, 0o600, atomicfile.Synced)
	}
	if err != nil {
		return fmt.Errorf("changes: journal: %w", err)
	}
	return nil
}

func (s *Store) removeJournal() error {
	if err := s.step("unjournal", ""); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(s.dir, journalFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("changes: journal: %w", err)
	}
	return nil
}

// recover finishes or rolls back an apply or undo that journal.json says
// was under way, then drops checkpoints a crash left before their journal
// was written (no host file had changed for those).
//
// An apply whose journal does not say its files are all done is rolled
// back, not forward: the user never saw it succeed, its changes are still
// pending (so applying again is one click), and the crash may have been
// the disk filling up, which rolling forward would meet again while the
// folder stayed half applied. Once the journal says the files are done,
// the folder already is what the user asked for and only the store's
// bookkeeping is missing, so that is finished instead. An undo is always
// finished: restoring from the checkpoint can run any number of times, and
// the user asked for the old files.
func (s *Store) recover() error {
	if err := s.resumeJournal(); err != nil {
		return err
	}
	cps, err := s.listCheckpoints()
	if err != nil {
		return err
	}
	have := map[string]bool{}
	for _, c := range cps {
		have[c.ID] = true
		if !c.Complete {
			_ = os.RemoveAll(s.cpDir(c.ID))
		}
	}
	des, _ := os.ReadDir(filepath.Join(s.dir, checkpoints))
	for _, de := range des {
		if !have[de.Name()] {
			_ = os.RemoveAll(filepath.Join(s.dir, checkpoints, de.Name()))
		}
	}
	return nil
}

// resumeJournal carries out what journal.json says is under way, if
// anything; the caller holds s.mu (or is Open).
func (s *Store) resumeJournal() error {
	b, err := os.ReadFile(filepath.Join(s.dir, journalFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	var j journal
	if err == nil {
		err = json.Unmarshal(b, &j)
	}
	if err != nil {
		return fmt.Errorf("changes: journal: %w", err)
	}
	cp, err := s.loadCheckpoint(j.Checkpoint)
	if err != nil {
		// The journal is written after its checkpoint: without one no
		// host file changed.
		return s.removeJournal()
	}
	if j.Op == opApply && j.FilesDone {
		root, err := os.OpenRoot(j.Workspace)
		if err == nil {
			defer root.Close()
		}
		if err := s.finishApply(root, cp); err != nil {
			return fmt.Errorf("changes: finish the apply a crash interrupted: %w", err)
		}
		return nil
	}
	root, err := os.OpenRoot(j.Workspace)
	if err != nil {
		return fmt.Errorf("changes: an %s in %s was interrupted and cannot be completed until the folder is there again (%w); "+
			"if it is gone for good, delete %s to give the %s up", j.Op, j.Workspace, err, filepath.Join(s.dir, journalFile), j.Op)
	}
	defer root.Close()
	switch j.Op {
	case opApply:
		if err := s.rollBack(root, cp.ID); err != nil {
			return fmt.Errorf("changes: roll back the apply a crash interrupted in %s: %w", j.Workspace, err)
		}
	case opUndo:
		if cp.Undone { // only the blobs and the journal remained
			_ = os.RemoveAll(filepath.Join(s.cpDir(cp.ID), blobsDir))
			return s.removeJournal()
		}
		if err := s.finishUndo(root, cp); err != nil {
			return fmt.Errorf("changes: finish the undo a crash interrupted in %s: %w", j.Workspace, err)
		}
	default:
		return fmt.Errorf("changes: journal: unknown operation %q", j.Op)
	}
	return nil
}
