package changes

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/printable"
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

// choose picks the records of m to apply, reporting the rest in res. goos
// is the host's system; folds says its file system takes names that
// differ only in case or Unicode normalisation as one.
func (s *Store) choose(root *os.Root, m pendingManifest, paths []string, opt ApplyOptions, goos string, folds bool, res *ApplyResult) []record {
	recs := m.Records
	refuse := func(p, why string) {
		res.Refused = append(res.Refused, Refusal{Path: printable.String(p), Reason: why})
	}
	var sel []record
	for _, q := range paths {
		if !slices.ContainsFunc(recs, func(r record) bool { return under(r.Path, q) || (r.From != "" && under(r.From, q)) }) {
			refuse(q, "nothing is pending there")
		}
	}
	for _, r := range recs {
		if len(paths) == 0 || slices.ContainsFunc(paths, func(q string) bool { return under(r.Path, q) || (r.From != "" && under(r.From, q)) }) {
			sel = append(sel, r)
		}
	}
	slices.SortFunc(sel, func(a, b record) int { return strings.Compare(a.Path, b.Path) })

	becomesDir := map[string]bool{}
	for _, r := range sel {
		if r.Kind != Deleted && r.Kind != ModeOnly && r.Type == Dir {
			becomesDir[r.Path] = true
		}
	}
	count := map[string]int{}
	for _, r := range sel {
		count[r.Path]++
	}
	var cand []record
	for _, r := range sel {
		why := recordProblem(r, goos)
		if why == "" && count[r.Path] > 1 {
			why = "the store holds two changes to it"
		}
		for _, p := range []string{r.Path, r.From} {
			if why == "" && p != "" {
				why = parentProblem(root, p, becomesDir)
			}
		}
		if why != "" {
			refuse(r.Path, why)
			continue
		}
		if opt.Auto && r.HostRuns {
			refuse(r.Path, "your tools run this path on the host, so Auto mode leaves it for you to review and apply")
			continue
		}
		conflict, err := mayOverwrite(root, r, m)
		if err != nil {
			refuse(r.Path, printable.String(err.Error()))
			continue
		}
		if conflict && (opt.Auto || !opt.Force) {
			res.Conflicts = append(res.Conflicts, r.Path)
			continue
		}
		if conflict {
			// Forced: the host's file may not be the Base the store saw,
			// so keepBefore reads its hash rather than trust the Base's.
			r.Base.Hash = ""
		}
		cand = append(cand, r)
	}

	bad := map[string]string{}
	if folds {
		byFold := map[string]string{}
		for _, r := range cand {
			for _, p := range []string{r.Path, r.From} {
				if p == "" {
					continue
				}
				k := foldKey(p)
				if o, ok := byFold[k]; ok && o != p {
					bad[p] = "differs from " + printable.String(o) + " only in case or Unicode normalisation, which this computer's folders treat as one name"
					bad[o] = "differs from " + printable.String(p) + " only in case or Unicode normalisation, which this computer's folders treat as one name"
				}
				byFold[k] = p
			}
		}
	}
	var take []record
	for _, r := range cand {
		why := bad[r.Path]
		if why == "" && r.From != "" {
			why = bad[r.From]
		}
		if why != "" {
			refuse(r.Path, why)
			continue
		}
		take = append(take, r)
	}
	return take
}

// recordProblem re-checks a record as if Ingest had not: says why it
// cannot reach the host, or "".
func recordProblem(r record, goos string) string {
	if why := nameProblem(r.Path, goos); why != "" {
		return why
	}
	switch r.Kind {
	case Deleted:
		return ""
	case Renamed:
		if why := nameProblem(r.From, goos); why != "" {
			return "renamed from a bad name: " + why
		}
		if under(r.Path, r.From) || under(r.From, r.Path) {
			return "renamed into or out of itself"
		}
	case ModeOnly:
		if r.Type != File && r.Type != Dir {
			return "only a file's or a folder's mode can change"
		}
		return ""
	case Added, Modified:
	default:
		return "unknown kind of change"
	}
	switch r.Type {
	case File:
		if !isHash(r.Blob) || r.Size < 0 {
			return "the store holds no content for it"
		}
	case Symlink:
		return badLink(r.Path, r.Link)
	case Dir:
	default:
		return "not a file, folder or symlink (devices, fifos and sockets are never created)"
	}
	return ""
}

// parentProblem says why p's parent folders on the host make it unsafe to
// write p: a symlink (which os.Root would follow while it stays inside),
// or a file no change turns into a folder.
func parentProblem(root *os.Root, p string, becomesDir map[string]bool) string {
	for _, a := range ancestors(p) {
		fi, err := root.Lstat(a)
		if notExist(err) {
			return ""
		}
		if err != nil {
			return printable.String(err.Error())
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return "its parent folder " + printable.String(a) + " is a symlink on the host"
		}
		if !fi.IsDir() {
			if becomesDir[a] {
				return ""
			}
			return "its parent " + printable.String(a) + " is not a folder on the host"
		}
	}
	return ""
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

// mayOverwrite says whether applying r could overwrite what the user
// changed: the store marked it, or the host's path (or a rename's old
// path) is no longer what the store first saw or changed after the
// guest's layer began, by Ingest's own reading (conflicts). A deletion of
// what the user deleted too is none. A device, fifo or socket at the path
// is an error: Airlock never replaces one.
func mayOverwrite(root *os.Root, r record, m pendingManifest) (bool, error) {
	for _, p := range []string{r.Path, r.From} {
		if p == "" {
			continue
		}
		if _, err := lstate(root, p); err != nil {
			return false, err
		}
	}
	if r.Conflict {
		return true, nil
	}
	now, err := hostBase(root, r.Path)
	if err != nil {
		return false, err
	}
	if r.Kind != Deleted || now.Exists {
		c, err := conflicts(root, r.Path, r.Base, now, m.Epoch, r.Kind == Deleted || r.Type != Dir, m.Written)
		if err != nil || c {
			return c, err
		}
	}
	if r.Kind != Renamed || r.FromBase == nil {
		return false, nil
	}
	from, err := hostBase(root, r.From)
	if err != nil || !from.Exists {
		return false, err
	}
	return conflicts(root, r.From, *r.FromBase, from, m.Epoch, true, m.Written)
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

// keepBefore records every path the apply touches as it is now in the
// checkpoint (content in blobs/), durably, before anything changes.
func (s *Store) keepBefore(root *os.Root, cp *cpManifest, take []record) error {
	seen := map[string]bool{}
	add := func(sts ...state) {
		for _, st := range sts {
			if !seen[st.Path] {
				seen[st.Path] = true
				cp.Before = append(cp.Before, st)
			}
		}
	}
	contentKept := map[string]bool{}
	baseHash := map[string]string{} // the host's files, as mayOverwrite found them
	for _, r := range take {
		if r.Base.Exists && r.Base.Type == File {
			baseHash[r.Path] = r.Base.Hash
		}
		for _, p := range []string{r.Path, r.From} {
			if p == "" {
				continue
			}
			for _, a := range ancestors(p) {
				if seen[a] {
					continue
				}
				st, err := lstate(root, a)
				if err != nil {
					return err
				}
				if !st.Exists {
					add(st) // a folder the apply creates
				}
			}
			if r.Kind == ModeOnly {
				st, err := lstate(root, p)
				if err != nil {
					return err
				}
				if st.Type == File {
					st.Hash = r.Base.Hash // the content stays
				}
				add(st)
				continue
			}
			// A folder that stays a folder keeps what it holds; anything
			// else at the path goes, folder tree and all.
			tree, err := lstateTree(root, p)
			if err != nil {
				return err
			}
			if p == r.Path && r.Kind != Deleted && r.Type == Dir && tree[0].Exists && tree[0].Type == Dir {
				tree = tree[:1]
			}
			for _, st := range tree {
				contentKept[st.Path] = true
			}
			add(tree...)
		}
	}
	for i, n := 0, len(cp.Before); i < n; i++ {
		parent := path.Dir(cp.Before[i].Path)
		if seen[parent] {
			continue
		}
		st, err := lstate(root, parent)
		if err != nil {
			return err
		}
		if st.Exists && st.Type == Dir {
			st.Parent = true
			add(st)
		}
	}
	blobs := filepath.Join(s.cpDir(cp.ID), blobsDir)
	if err := os.MkdirAll(blobs, 0o700); err != nil {
		return err
	}
	for i := range cp.Before {
		st := &cp.Before[i]
		if !st.Exists || st.Type != File || !contentKept[st.Path] {
			continue
		}
		st.Blob = fmt.Sprint(i)
		if err := s.step("keep", st.Path); err != nil {
			return err
		}
		dst := filepath.Join(blobs, st.Blob)
		if keepByLink(root, st.Path, *st, dst) == nil {
			st.Hash = baseHash[st.Path]
			if st.Hash == "" {
				h, err := hashHostFile(root, st.Path)
				if err != nil {
					return err
				}
				st.Hash = h
			}
		} else {
			hash, err := keepContent(root, st.Path, *st, dst)
			if err != nil {
				return err
			}
			st.Hash = hash
		}
		cp.Bytes += st.Size
	}
	if !perFileSync {
		d, err := os.Open(s.dir)
		if err != nil {
			return err
		}
		err = syncFS(d)
		d.Close()
		if err != nil {
			return err
		}
	}
	return s.saveCheckpoint(*cp)
}

// change makes the host's files what take says: deletions; new content
// into temporaries beside the paths (and new folders); once that is
// durable, each temporary renamed over its path (so each file is its old
// or its new self, never half); last, folders' modes and times, deepest
// first.
func (s *Store) change(root *os.Root, id string, take []record, linkable map[string]bool) error {
	var dirs []string
	// Deletions first: a folder deleted and made again (an opaque folder
	// in the guest's layer) loses its old content, not its new.
	for _, r := range take {
		if r.Kind == Deleted {
			if err := s.removeAll(root, r.Path); err != nil {
				return err
			}
			dirs = append(dirs, path.Dir(r.Path))
		}
	}
	for _, r := range take {
		if r.Kind == Deleted || r.Kind == ModeOnly {
			continue
		}
		for _, a := range ancestors(r.Path) {
			if err := s.mkdir(root, a); err != nil {
				return err
			}
		}
		dirs = append(dirs, path.Dir(r.Path))
		switch r.Type {
		case Dir:
			if err := s.mkdir(root, r.Path); err != nil {
				return err
			}
		case Symlink:
			tmp := tempName(id, r.Path)
			if err := s.step("symlink", tmp); err != nil {
				return err
			}
			_ = root.Remove(tmp)
			if err := root.Symlink(r.Link, tmp); err != nil {
				return err
			}
			if err := asFolderOwner(root, tmp); err != nil {
				return err
			}
			if !r.ModTime.IsZero() {
				if err := setLinkTime(root, tmp, r.ModTime); err != nil {
					return err
				}
			}
		case File:
			tmp := tempName(id, r.Path)
			if err := s.step("write", tmp); err != nil {
				return err
			}
			if linkable[r.Blob] && s.linkHostFile(root, tmp, s.blobPath(r.Blob), r.Size, r.Mode, r.ModTime) == nil {
				continue
			}
			src, err := os.Open(s.blobPath(r.Blob))
			if err != nil {
				return fmt.Errorf("the store lost the content of %s: %w", printable.String(r.Path), err)
			}
			err = s.writeHostFile(root, tmp, src, r.Size, r.Mode, r.ModTime)
			src.Close()
			if err != nil {
				return fmt.Errorf("write %s: %w", printable.String(r.Path), err)
			}
		}
	}
	if err := s.syncTree(root, dirs); err != nil {
		return err
	}
	for _, r := range take {
		switch {
		case r.Kind == Deleted:
		case r.Kind == ModeOnly:
			if err := s.step("chmod", r.Path); err != nil {
				return err
			}
			if err := root.Chmod(r.Path, r.Mode.Perm()); err != nil {
				return err
			}
		case r.Type == File || r.Type == Symlink:
			if fi, err := root.Lstat(r.Path); err == nil && fi.IsDir() {
				if err := s.removeAll(root, r.Path); err != nil {
					return err
				}
			}
			if err := s.step("rename", r.Path); err != nil {
				return err
			}
			if err := root.Rename(tempName(id, r.Path), r.Path); err != nil {
				return fmt.Errorf("rename over %s: %w", printable.String(r.Path), err)
			}
		}
		if r.Kind == Renamed {
			if err := s.removeAll(root, r.From); err != nil {
				return err
			}
			dirs = append(dirs, path.Dir(r.From))
		}
	}
	for i := len(take) - 1; i >= 0; i-- {
		r := take[i]
		if r.Kind == Deleted || r.Type != Dir || r.Kind == ModeOnly {
			continue
		}
		if err := s.step("chmod", r.Path); err != nil {
			return err
		}
		if err := root.Chmod(r.Path, r.Mode.Perm()); err != nil {
			return err
		}
		if !r.ModTime.IsZero() {
			if err := s.step("chtimes", r.Path); err != nil {
				return err
			}
			if err := root.Chtimes(r.Path, r.ModTime, r.ModTime); err != nil {
				return err
			}
		}
	}
	return s.syncTree(root, dirs)
}

// soleBlobs are the blobs one pending change alone names: Apply may link
// those into the folder rather than copy them, since the store drops
// them once applied.
func soleBlobs(recs []record) map[string]bool {
	n := map[string]int{}
	for _, r := range recs {
		if r.Blob != "" {
			n[r.Blob]++
		}
	}
	out := map[string]bool{}
	for b, c := range n {
		if c == 1 {
			out[b] = true
		}
	}
	return out
}

// mkdir makes the folder p unless it is one; a file or symlink there
// (kept in the checkpoint) goes first.
func (s *Store) mkdir(root *os.Root, p string) error {
	fi, err := root.Lstat(p)
	if err == nil && fi.IsDir() {
		return nil
	}
	if err == nil {
		if err := s.step("remove", p); err != nil {
			return err
		}
		if err := root.Remove(p); err != nil {
			return err
		}
	}
	if err := s.step("mkdir", p); err != nil {
		return err
	}
	if err := root.Mkdir(p, 0o755); err != nil {
		return fmt.Errorf("make folder %s: %w", printable.String(p), err)
	}
	return asFolderOwner(root, p)
}

func (s *Store) removeAll(root *os.Root, p string) error {
	if err := s.step("remove", p); err != nil {
		return err
	}
	if err := root.RemoveAll(p); err != nil {
		return fmt.Errorf("remove %s: %w", printable.String(p), err)
	}
	return nil
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
			if fi, err := root.Lstat(a.Path); err == nil && a.Type == File && fi.Mode().IsRegular() &&
				fi.Size() == a.Size && fi.ModTime().Equal(a.ModTime) && fi.Mode().Perm() == a.Mode {
				cp.After[i].Ino, cp.After[i].Ctime = identity(fi)
			}
			if err := m.noteWritten(root, a.Path, a.Hash); err != nil {
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
