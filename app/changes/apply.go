package changes

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
)

// ApplyOptions say how Apply treats what it would otherwise keep pending.
type ApplyOptions struct {
	// Force applies conflicting changes too (the host's version goes into
	// the checkpoint, so Undo brings it back).
	Force bool
	// Auto applies only what Auto mode may: no conflicts, no HostRuns
	// paths.
	Auto bool
}

// Apply carries the pending changes to paths (all when none) into the
// folder workspace, beneath it only (os.Root), journaled so that a crash
// at any point leaves each file old or new and the next Open finishes or
// rolls back; the previous version of every path it overwrites or deletes
// goes into a new checkpoint. Applied paths leave the pending changes and
// join the forget list.
//
// A path given that names a folder selects every pending change beneath
// it. What is not applied stays pending: a conflict (the host's path is
// no longer what the change was made against) is reported in Conflicts,
// anything that could reach outside the folder or create what Airlock
// never creates in Refused.
func (s *Store) Apply(workspace string, paths []string, opt ApplyOptions) (ApplyResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	res := ApplyResult{Applied: []string{}}
	if err := s.resumeJournal(); err != nil {
		return res, err
	}
	m, err := s.loadPending()
	if err != nil {
		return res, err
	}
	root, err := os.OpenRoot(workspace)
	if err != nil {
		return res, fmt.Errorf("changes: apply: %w", err)
	}
	defer root.Close()
	folds := runtime.GOOS == "darwin" || foldsNames(root, workspace)
	take := s.choose(root, m, paths, opt, runtime.GOOS, folds, &res)
	if len(take) == 0 {
		return res, nil
	}
	now := s.opts.Now()
	cp := cpManifest{Checkpoint: Checkpoint{ID: s.newCheckpointID(now), Time: now, Summary: summarize(take)}}
	for _, r := range take {
		cp.Paths = append(cp.Paths, r.Path)
		cp.Forget = append(cp.Forget, r.Path)
		if r.From != "" {
			cp.Forget = append(cp.Forget, r.From)
		}
	}
	if err := s.keepBefore(root, &cp, take); err != nil {
		_ = os.RemoveAll(s.cpDir(cp.ID))
		return res, fmt.Errorf("changes: apply: keep the previous versions: %w (nothing changed in the folder)", err)
	}
	if err := s.writeJournal(journal{Op: opApply, Checkpoint: cp.ID, Workspace: workspace}); err != nil {
		_ = os.RemoveAll(s.cpDir(cp.ID))
		return res, err
	}
	if err := s.change(root, cp.ID, take, soleBlobs(m.Records)); err != nil {
		if rerr := s.rollBack(root, cp.ID); rerr != nil {
			return res, fmt.Errorf("changes: apply: %w; rolling back failed too (%v): the next start of Airlock rolls back again", err, rerr)
		}
		return res, fmt.Errorf("changes: apply: %w (the folder is as it was; the changes stay pending)", err)
	}
	cp.After = s.after(root, cp.Before, take)
	if err := s.saveCheckpoint(cp); err != nil {
		return res, s.failLate(root, cp.ID, err)
	}
	if err := s.writeJournal(journal{Op: opApply, Checkpoint: cp.ID, Workspace: workspace, FilesDone: true}); err != nil {
		return res, s.failLate(root, cp.ID, err)
	}
	if err := s.finishApply(root, cp); err != nil {
		return res, fmt.Errorf("changes: apply: the files are applied but the store is not up to date (%w); the next start of Airlock finishes it", err)
	}
	s.enforceLimit(cp.ID)
	res.Checkpoint = cp.ID
	res.Applied = cp.Paths
	return res, nil
}

// failLate rolls back an apply whose files all changed but whose
// bookkeeping failed before the journal said so.
func (s *Store) failLate(root *os.Root, id string, err error) error {
	if rerr := s.rollBack(root, id); rerr != nil {
		return fmt.Errorf("changes: apply: %w; rolling back failed too (%v): the next start of Airlock rolls back again", err, rerr)
	}
	return fmt.Errorf("changes: apply: %w (the folder is as it was; the changes stay pending)", err)
}

func summarize(recs []record) string {
	counts := map[Kind]int{}
	for _, r := range recs {
		counts[r.Kind]++
	}
	var parts []string
	for _, k := range []struct {
		kind Kind
		word string
	}{{Added, "added"}, {Modified, "modified"}, {Deleted, "deleted"}, {Renamed, "renamed"}, {ModeOnly, "mode changed"}} {
		if n := counts[k.kind]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, k.word))
		}
	}
	return strings.Join(parts, ", ")
}

// after records the touched paths as the apply left them, for Undo to
// tell whether the user changed one since.
func (s *Store) after(root *os.Root, before []state, take []record) []state {
	hashes := map[string]string{}
	for _, r := range take {
		switch {
		case r.Kind == ModeOnly:
			hashes[r.Path] = r.Base.Hash
		case r.Kind != Deleted && r.Type == File:
			hashes[r.Path] = r.Blob
		}
	}
	var out []state
	for _, b := range before {
		if b.Parent {
			continue
		}
		st, err := lstate(root, b.Path)
		if err != nil {
			st = state{Path: b.Path, Exists: true, Type: "unreadable"} // never matches: Undo refuses it
		}
		if st.Type == File {
			st.Hash = hashes[b.Path]
		}
		out = append(out, st)
	}
	return out
}

// finishApply does what remains once the files are all applied: the
// applied changes leave the pending set and join the forget list, and the
// checkpoint is complete. Each step can run again after a crash. root is
// the folder, nil when it cannot be opened (Undo then reads the files to
// know they are unchanged).
func (s *Store) finishApply(root *os.Root, cp cpManifest) error {
	if err := s.step("pending", ""); err != nil {
		return err
	}
	m, err := s.loadPending()
	if err != nil {
		return err
	}
	applied := make(map[string]bool, len(cp.Paths))
	for _, p := range cp.Paths {
		applied[p] = true
	}
	m.Records = slices.DeleteFunc(m.Records, func(r record) bool { return applied[r.Path] })
	// The applied content goes before Airlock notes what it wrote: a
	// blob linked into the folder changes its file's ctime as it goes.
	// Should the manifest not be saved below, the journal still says the
	// files are done, and the next start drops those records all the same.
	_ = s.pruneBlobs(m)
	if root != nil {
		for i, a := range cp.After {
			fi, err := root.Lstat(a.Path)
			if err == nil && a.Type == File && fi.Mode().IsRegular() &&
				fi.Size() == a.Size && fi.ModTime().Equal(a.ModTime) && fi.Mode().Perm() == a.Mode {
				cp.After[i].Ino, cp.After[i].Ctime = identity(fi)
			}
			if err := m.noteStat(a.Path, fi, err, a.Hash); err != nil {
				return err
			}
		}
		for _, b := range cp.Before {
			if b.Parent {
				if err := m.noteWritten(root, b.Path, ""); err != nil {
					return err
				}
			}
		}
	}
	if err := s.savePending(m); err != nil {
		return err
	}
	if err := s.step("forget", ""); err != nil {
		return err
	}
	if err := s.addForgotten(cp.Forget); err != nil {
		return err
	}
	if err := s.step("complete", cp.ID); err != nil {
		return err
	}
	cp.Complete = true
	if err := s.saveCheckpoint(cp); err != nil {
		return err
	}
	return s.removeJournal()
}

// rollBack puts the folder back as checkpoint id found it and drops the
// checkpoint: the changes stay pending.
func (s *Store) rollBack(root *os.Root, id string) error {
	cp, err := s.loadCheckpoint(id)
	if err != nil {
		return err
	}
	if err := s.restore(root, id, filepath.Join(s.cpDir(id), blobsDir), cp.Before); err != nil {
		return err
	}
	if err := s.step("drop", id); err != nil {
		return err
	}
	if err := os.RemoveAll(s.cpDir(id)); err != nil {
		return err
	}
	return s.removeJournal()
}
