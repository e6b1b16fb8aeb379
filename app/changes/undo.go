package changes

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/printable"
)

// Checkpoints lists the checkpoints, newest first, and the store's space.
func (s *Store) Checkpoints() ([]Checkpoint, Usage, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cps, err := s.listCheckpoints()
	if err != nil {
		return nil, Usage{}, err
	}
	out := []Checkpoint{}
	for _, c := range cps {
		if c.Complete {
			out = append(out, c.Checkpoint)
		}
	}
	return out, s.usage(), nil
}

func (s *Store) usage() Usage {
	return Usage{
		PendingBytes:    dirBytes(filepath.Join(s.dir, pendingDir)),
		CheckpointBytes: dirBytes(filepath.Join(s.dir, checkpoints)),
		LimitBytes:      s.opts.Limit,
	}
}

// enforceLimit drops the oldest checkpoints until the store fits its
// bound. Pending changes are never dropped, nor the checkpoint keep that
// was just made: without it the apply the user just saw could not be
// undone.
func (s *Store) enforceLimit(keep string) {
	u := s.usage()
	total := u.PendingBytes + u.CheckpointBytes
	if total <= s.opts.Limit {
		return
	}
	cps, err := s.listCheckpoints()
	if err != nil {
		return
	}
	for i := len(cps) - 1; i >= 0 && total > s.opts.Limit; i-- {
		if cps[i].ID == keep || !cps[i].Complete {
			continue
		}
		n := dirBytes(s.cpDir(cps[i].ID))
		if os.RemoveAll(s.cpDir(cps[i].ID)) == nil {
			total -= n
		}
	}
}

// ErrUndone means the checkpoint was undone already.
var ErrUndone = errors.New("that checkpoint was already undone")

// ErrChangedSince means a path the checkpoint would restore changed after
// the apply.
var ErrChangedSince = errors.New("changed after the apply")

// Undo restores the folder workspace to what it was before checkpoint id
// ("" is the newest not undone): bytes, modes and modification times.
// Files the apply added are removed. It refuses, naming them, when paths
// changed after the apply (by the user or a later apply): Undo never
// overwrites what it did not write.
func (s *Store) Undo(workspace, id string) (Checkpoint, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.resumeJournal(); err != nil {
		return Checkpoint{}, err
	}
	var cp cpManifest
	if id == "" {
		cps, err := s.listCheckpoints()
		if err != nil {
			return Checkpoint{}, err
		}
		i := slices.IndexFunc(cps, func(c cpManifest) bool { return c.Complete && !c.Undone })
		if i < 0 {
			return Checkpoint{}, errors.New("changes: undo: there is no checkpoint to undo")
		}
		cp = cps[i]
	} else {
		var err error
		if cp, err = s.loadCheckpoint(id); err != nil {
			return Checkpoint{}, err
		}
		if !cp.Complete {
			return Checkpoint{}, fmt.Errorf("changes: undo: checkpoint %s is an apply under way", cp.ID)
		}
	}
	if cp.Undone {
		return cp.Checkpoint, fmt.Errorf("changes: undo %s: %w", cp.ID, ErrUndone)
	}
	root, err := os.OpenRoot(workspace)
	if err != nil {
		return Checkpoint{}, fmt.Errorf("changes: undo: %w", err)
	}
	defer root.Close()
	for _, b := range cp.Before {
		if b.Blob == "" {
			continue
		}
		if fi, err := os.Stat(filepath.Join(s.cpDir(cp.ID), blobsDir, b.Blob)); err != nil || fi.Size() != b.Size {
			return Checkpoint{}, fmt.Errorf("changes: undo %s: the previous version of %s it kept is damaged or changed since "+
				"(a program that had the file open may have written to it); restore it by hand from %s",
				cp.ID, printable.String(b.Path), filepath.Join(s.cpDir(cp.ID), blobsDir, b.Blob))
		}
	}
	if changed := changedSince(root, cp); len(changed) > 0 {
		return Checkpoint{}, fmt.Errorf("changes: undo %s: %s %w; undo would overwrite that: move it away (or copy your edits elsewhere) and undo again",
			cp.ID, strings.Join(changed, ", "), ErrChangedSince)
	}
	if err := s.writeJournal(journal{Op: opUndo, Checkpoint: cp.ID, Workspace: workspace}); err != nil {
		return Checkpoint{}, err
	}
	if err := s.finishUndo(root, cp); err != nil {
		return Checkpoint{}, fmt.Errorf("changes: undo %s: %w; the folder is partly restored: undo again, or restart Airlock, to finish", cp.ID, err)
	}
	cp.Undone, cp.Bytes = true, 0
	return cp.Checkpoint, nil
}

// changedSince lists, escaped, the paths of cp that are no longer as the
// apply left them.
func changedSince(root *os.Root, cp cpManifest) []string {
	touched := map[string]bool{}
	created := map[string]bool{}
	for _, b := range cp.Before {
		touched[b.Path] = true
		if !b.Exists {
			created[b.Path] = true
		}
	}
	var out []string
	for _, a := range cp.After {
		if symlinkAbove(root, a.Path) {
			// A folder above it became a symlink: restoring would write
			// through it.
			out = append(out, printable.String(a.Path))
			continue
		}
		same, err := sameState(root, a)
		if err != nil || !same {
			out = append(out, printable.String(a.Path))
			continue
		}
		if a.Exists && a.Type == Dir && created[a.Path] {
			names, _ := readDir(root, a.Path)
			for _, n := range names {
				if p := path.Join(a.Path, n); !touched[p] {
					out = append(out, printable.String(p))
				}
			}
		}
	}
	return out
}

// finishUndo restores cp's paths and marks it undone; it can run again
// after a crash.
func (s *Store) finishUndo(root *os.Root, cp cpManifest) error {
	if err := s.restore(root, cp.ID, filepath.Join(s.cpDir(cp.ID), blobsDir), cp.Before); err != nil {
		return err
	}
	if err := s.step("pending", ""); err != nil {
		return err
	}
	m, err := s.loadPending()
	if err != nil {
		return err
	}
	for _, b := range cp.Before {
		if err := m.noteWritten(root, b.Path, b.Hash); err != nil {
			return err
		}
	}
	if err := s.savePending(m); err != nil {
		return err
	}
	if err := s.step("undone", cp.ID); err != nil {
		return err
	}
	cp.Undone, cp.Bytes = true, 0
	if err := s.saveCheckpoint(cp); err != nil {
		return err
	}
	_ = os.RemoveAll(filepath.Join(s.cpDir(cp.ID), blobsDir))
	return s.removeJournal()
}

// symlinkAbove says whether one of p's parent folders is a symlink on
// the host (os.Root would follow it while it stays inside).
func symlinkAbove(root *os.Root, p string) bool {
	for _, a := range ancestors(p) {
		fi, err := root.Lstat(a)
		if err != nil || fi.Mode()&fs.ModeSymlink != 0 || !fi.IsDir() {
			return err == nil && fi.Mode()&fs.ModeSymlink != 0
		}
	}
	return false
}

// sameState says whether the host path now is what want recorded
// (comparing content by hash when want has one and all else matches).
func sameState(root *os.Root, want state) (bool, error) {
	got, err := lstate(root, want.Path)
	if err != nil {
		return false, err
	}
	if got.Exists != want.Exists {
		return false, nil
	}
	if !got.Exists {
		return true, nil
	}
	if got.Type != want.Type || got.Mode != want.Mode {
		return false, nil
	}
	switch got.Type {
	case File:
		if got.Size != want.Size || !got.ModTime.Equal(want.ModTime) {
			return false, nil
		}
		if want.Ino != 0 && got.Ino == want.Ino && got.Ctime == want.Ctime {
			return true, nil
		}
		if want.Hash != "" {
			h, err := hashHostFile(root, want.Path)
			return h == want.Hash, err
		}
	case Symlink:
		return got.Link == want.Link, nil
	}
	return true, nil
}

// dirBytes is the size of the files beneath dir.
func dirBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}
