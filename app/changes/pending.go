package changes

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/guest/api"
	"github.com/airlock-sandbox/airlock/internal/printable"
)

// Limits bound what Ingest reads from the guest.
type Limits struct {
	// Entries bounds the layer's entries (files, folders, links, whiteouts).
	Entries int
	// Bytes bounds the content it carries in all.
	Bytes int64
	// NameBytes bounds one path.
	NameBytes int
}

// DefaultLimits are Ingest's bounds when the caller gives none.
var DefaultLimits = Limits{Entries: 200_000, Bytes: DefaultLimit, NameBytes: 4096}

// Summary says what an Ingest found.
type Summary struct {
	Pending int       `json:"pending"`
	Bytes   int64     `json:"bytes"`
	Refused []Refusal `json:"refused,omitempty"`
}

// Ingest replaces the pending changes with what the guest's layer holds:
// r is the layer as a tar stream (OCI layer format: a whiteout is
// ".wh.NAME", an opaque folder holds ".wh..wh..opq"), hostile and bounded
// by lim. workspace is the host folder the layer lies over; epoch is when
// the layer began. A path already pending keeps the Base it had; a new one
// takes the host's path as it is now, and conflicts if the host changed it
// after epoch. An entry that cannot reach the host (a device, fifo,
// socket, an unsafe name or link) is refused and reported, not stored. A
// stream that breaks a bound or the format leaves the pending changes as
// they were.
func (s *Store) Ingest(ctx context.Context, r io.Reader, workspace string, epoch time.Time, lim Limits) (Summary, error) {
	return s.ingest(ctx, r, workspace, epoch, lim, runtime.GOOS)
}

// ingest is Ingest on the operating system goos: the file systems of
// darwin take names that differ only in Unicode normalisation as one, and
// Windows cannot hold some names.
func (s *Store) ingest(ctx context.Context, r io.Reader, workspace string, epoch time.Time, lim Limits, goos string) (Summary, error) {
	if lim.Entries <= 0 {
		lim.Entries = DefaultLimits.Entries
	}
	if lim.Bytes <= 0 {
		lim.Bytes = DefaultLimits.Bytes
	}
	if lim.NameBytes <= 0 {
		lim.NameBytes = DefaultLimits.NameBytes
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old, err := s.loadPending()
	if err != nil {
		return Summary{}, err
	}
	root, err := os.OpenRoot(workspace)
	if err != nil {
		return Summary{}, fmt.Errorf("changes: workspace: %w", err)
	}
	defer root.Close()

	var m pendingManifest
	var sum Summary
	l, err := s.readLayer(ctx, r, lim)
	if err == nil {
		if goos == "windows" {
			for p := range l.entries {
				if why := windowsName(p); why != "" {
					l.refuse(p, why)
				}
			}
		}
		folds := goos == "darwin" || foldsNames(root, workspace)
		m, sum, err = s.compare(root, l, old, epoch, folds)
	}
	if err == nil {
		err = s.savePending(m)
	}
	if err != nil {
		// The blobs this stream added go; the old records' stay.
		return Summary{}, errors.Join(err, s.pruneBlobs(old))
	}
	return sum, s.pruneBlobs(m)
}

// compare turns what the layer holds into records against the host's
// folder at root. folds says the host's file system takes names that
// differ only in case or Unicode normalisation as one.
func (s *Store) compare(root *os.Root, l *layer, old pendingManifest, epoch time.Time, folds bool) (pendingManifest, Summary, error) {
	forgotten, err := s.loadForgotten()
	if err != nil {
		return pendingManifest{}, Summary{}, err
	}
	paths, links, err := l.screen(root, newPathSet(forgotten), folds)
	if err != nil {
		return pendingManifest{}, Summary{}, err
	}

	oldBase := map[string]Base{}
	for _, r := range old.Records {
		oldBase[r.Path] = r.Base
		if r.FromBase != nil {
			oldBase[r.From] = *r.FromBase
		}
	}
	// What Airlock wrote counts while the layer is the same one.
	written := old.Written
	if !old.Epoch.Equal(epoch) {
		written = nil
	}
	c := comparer{store: s, root: root, epoch: epoch, oldBase: oldBase, now: map[string]hostState{}, written: written}
	var recs []record
	for _, p := range paths {
		r, ok, err := c.record(p, l.entries[p])
		if err != nil {
			return pendingManifest{}, Summary{}, err
		}
		if ok {
			recs = append(recs, r)
		}
	}
	hidden, err := c.hidden(l, links)
	if err != nil {
		return pendingManifest{}, Summary{}, err
	}
	for _, r := range hidden {
		if _, err := c.host(r.Path); err != nil {
			return pendingManifest{}, Summary{}, err
		}
	}
	recs = c.pairRenames(append(recs, hidden...))

	var sum Summary
	for i := range recs {
		if err := c.finish(&recs[i]); err != nil {
			return pendingManifest{}, Summary{}, err
		}
		sum.Bytes += recs[i].Size
	}
	slices.SortFunc(recs, func(a, b record) int { return cmp.Compare(a.Path, b.Path) })
	sum.Pending = len(recs)
	for _, p := range slices.Sorted(maps.Keys(l.refused)) {
		sum.Refused = append(sum.Refused, Refusal{Path: printable.String(p), Reason: l.refused[p]})
	}
	return pendingManifest{Epoch: epoch, Records: recs, Written: written}, sum, nil
}

// screen drops the layer's entries the guest's layer holds only until it
// forgets them (applied or discarded), refuses those that cannot reach
// the host, and returns the paths left to compare, sorted, and what it
// found of the host's folders (linkedFolder).
func (l *layer) screen(root *os.Root, forget pathSet, folds bool) ([]string, map[string]bool, error) {
	for p := range l.entries {
		if forget.holds(p) {
			delete(l.entries, p)
		}
	}
	for p := range l.opaque {
		if forget.holds(p) {
			delete(l.opaque, p)
		}
	}
	if folds {
		refuseFolded(l)
	}
	links := map[string]bool{}
	var paths []string
	for _, p := range slices.Sorted(maps.Keys(l.entries)) {
		if a, ok := refusedAncestor(p, l.refused); ok {
			l.refuse(p, "inside "+a+", which is refused")
		} else if a := nonFolderAncestor(p, l.entries); a != "" {
			l.refuse(p, "inside "+a+", which the layer holds as no folder")
		} else if a, err := linkedFolder(root, path.Dir(p), links); err != nil {
			return nil, nil, err
		} else if a != "" {
			l.refuse(p, "its folder "+a+" is a symlink on the host")
		}
		if _, refused := l.refused[p]; !refused {
			paths = append(paths, p)
		}
	}
	return paths, links, nil
}

// comparer compares layer entries with the host's folder.
type comparer struct {
	store   *Store
	root    *os.Root
	epoch   time.Time
	oldBase map[string]Base
	now     map[string]hostState // hostBase, once per path
	written map[string]written   // what Airlock wrote to the host
}

func (c *comparer) host(p string) (hostState, error) {
	if h, ok := c.now[p]; ok {
		return h, nil
	}
	h, err := hostBase(c.root, p)
	if err != nil {
		return h, fmt.Errorf("changes: %s: %w", printable.String(p), err)
	}
	c.now[p] = h
	return h, nil
}

// record returns the change e makes to the host's path p; false when it
// makes none.
func (c *comparer) record(p string, e *layerEntry) (record, bool, error) {
	h, err := c.host(p)
	if err != nil {
		return record{}, false, err
	}
	r := record{Entry: Entry{Path: p, Type: e.typ, Mode: e.mode, Size: e.size, ModTime: e.mtime, Link: e.link}, Blob: e.blob}
	switch {
	case e.typ == "":
		r.Kind, r.Mode, r.ModTime = Deleted, 0, time.Time{}
		return r, h.Exists, nil
	case !h.Exists:
		r.Kind = Added
	case h.Type != e.typ, e.typ == File && h.Hash != e.blob:
		r.Kind = Modified
	case e.typ == Symlink:
		target, err := c.root.Readlink(filepath.FromSlash(p))
		if err != nil {
			return record{}, false, fmt.Errorf("changes: %s: %w", printable.String(p), err)
		}
		r.Kind = Modified
		return r, target != e.link, nil
	case h.Mode != e.mode:
		r.Kind = ModeOnly
	default:
		return record{}, false, nil
	}
	return r, true, nil
}

// hidden returns a Deleted record for each host child of an opaque folder
// that the layer does not hold.
func (c *comparer) hidden(l *layer, links map[string]bool) ([]record, error) {
	var recs []record
	for _, d := range slices.Sorted(maps.Keys(l.opaque)) {
		if _, ok := l.refused[d]; ok {
			continue
		}
		if _, ok := refusedAncestor(d, l.refused); ok {
			continue
		}
		dir := d
		if d == "" {
			dir = "."
		} else if a, err := linkedFolder(c.root, d, links); err != nil || a != "" {
			continue // a link's target is not what the guest saw hidden
		}
		if h, err := c.host(dir); err != nil || !h.Exists || h.Type != Dir {
			continue
		}
		f, err := c.root.Open(filepath.FromSlash(dir))
		if err != nil {
			return nil, fmt.Errorf("changes: %s: %w", printable.String(d), err)
		}
		names, err := f.Readdirnames(-1)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("changes: %s: %w", printable.String(d), err)
		}
		slices.Sort(names)
		for _, n := range names {
			p := path.Join(d, n)
			if l.entries[p] == nil && l.refused[p] == "" {
				recs = append(recs, record{Entry: Entry{Path: p, Kind: Deleted}})
			}
		}
	}
	return recs, nil
}

// pairRenames turns a deleted file and an added file with the same
// content into one rename of the old path to the new.
func (c *comparer) pairRenames(recs []record) []record {
	deleted := map[string][]int{} // content hash -> deleted records, by path
	for i, r := range recs {
		if h := c.now[r.Path]; r.Kind == Deleted && h.Type == File && h.Size > 0 {
			deleted[h.Hash] = append(deleted[h.Hash], i)
		}
	}
	gone := map[int]bool{}
	for i, r := range recs {
		if d := deleted[r.Blob]; r.Kind == Added && r.Type == File && len(d) > 0 {
			recs[i].Kind, recs[i].From = Renamed, recs[d[0]].Path
			deleted[r.Blob], gone[d[0]] = d[1:], true
		}
	}
	out := recs[:0]
	for i, r := range recs {
		if !gone[i] {
			out = append(out, r)
		}
	}
	return out
}

// finish sets a record's Base (and FromBase), Conflict, HostRuns, Text and
// line counts.
func (c *comparer) finish(r *record) error {
	base, err := c.base(r.Path)
	if err != nil {
		return err
	}
	now := c.now[r.Path]
	r.Base = base
	// Anything but a folder in place of a host folder removes what is in it.
	if r.Conflict, err = conflicts(c.root, r.Path, base, now, c.epoch, r.Type != Dir, c.written); err != nil {
		return fmt.Errorf("changes: %s: %w", printable.String(r.Path), err)
	}
	oldPath := r.Path
	if r.Kind == Renamed {
		oldPath = r.From
		fb, err := c.base(r.From)
		if err != nil {
			return err
		}
		r.FromBase = &fb
		conflict, err := conflicts(c.root, r.From, fb, c.now[r.From], c.epoch, true, c.written)
		if err != nil {
			return fmt.Errorf("changes: %s: %w", printable.String(r.From), err)
		}
		r.Conflict = r.Conflict || conflict
	}
	r.HostRuns = api.HostRuns(r.Path) || r.From != "" && api.HostRuns(r.From)

	// Lines against the host's version: a folder, symlink or nothing is
	// an empty file.
	var old, new string
	oldText, newText := true, true
	if h := c.now[oldPath]; h.Type == File {
		old, oldText, err = readText(func() (io.ReadCloser, error) { return c.root.Open(filepath.FromSlash(oldPath)) }, h.Size)
		if err != nil {
			return fmt.Errorf("changes: %s: %w", printable.String(oldPath), err)
		}
	} else if r.Kind == Deleted {
		return nil // a folder or a symlink
	}
	if r.Type == File {
		new, newText, err = readText(func() (io.ReadCloser, error) { return os.Open(c.store.blobPath(r.Blob)) }, r.Size)
		if err != nil {
			return fmt.Errorf("changes: %s: %w", printable.String(r.Path), err)
		}
	} else if r.Kind != Deleted {
		return nil
	}
	if r.Text = oldText && newText; r.Text {
		r.LinesAdded, r.LinesRemoved = countLines(old, new)
	}
	return nil
}

// base is what the path p was when the store first saw it: the Base an
// earlier Ingest kept, else the host's path now.
func (c *comparer) base(p string) (Base, error) {
	if b, ok := c.oldBase[p]; ok {
		return b, nil
	}
	h, err := c.host(p)
	return h.Base, err
}

// pathSet is a set of slash paths.
type pathSet map[string]bool

func newPathSet(paths []string) pathSet {
	set := make(pathSet, len(paths))
	for _, p := range paths {
		set[p] = true
	}
	return set
}

// holds reports whether p or a folder above it is in the set.
func (set pathSet) holds(p string) bool {
	for ; p != "." && p != "/" && p != ""; p = path.Dir(p) {
		if set[p] {
			return true
		}
	}
	return false
}

// refusedAncestor returns the nearest folder above p that is refused.
func refusedAncestor(p string, refused map[string]string) (string, bool) {
	for d := path.Dir(p); d != "."; d = path.Dir(d) {
		if _, ok := refused[d]; ok {
			return d, true
		}
	}
	return "", false
}

// nonFolderAncestor returns the nearest path above p that the layer holds
// as something other than a folder: a layer's folders hold its entries.
func nonFolderAncestor(p string, entries map[string]*layerEntry) string {
	for d := path.Dir(p); d != "."; d = path.Dir(d) {
		if e := entries[d]; e != nil && e.typ != Dir {
			return d
		}
	}
	return ""
}

// linkedFolder returns the folder dir, or one above it, that is a symlink
// on the host, "" when none is; links caches what it found.
func linkedFolder(root *os.Root, dir string, links map[string]bool) (string, error) {
	if dir == "." || dir == "" {
		return "", nil
	}
	elems := strings.Split(dir, "/")
	for i := 1; i <= len(elems); i++ {
		d := strings.Join(elems[:i], "/")
		link, ok := links[d]
		if !ok {
			fi, err := root.Lstat(filepath.FromSlash(d))
			if notExist(err) {
				return "", nil // nothing below a missing folder exists
			}
			if err != nil {
				return "", fmt.Errorf("changes: %s: %w", printable.String(d), err)
			}
			link = fi.Mode()&fs.ModeSymlink != 0
			links[d] = link
		}
		if link {
			return d, nil
		}
	}
	return "", nil
}

// List returns the pending changes, sorted by path. Each Conflict is
// the last pull's, or set when the host's path in the folder workspace
// (or a rename's old path) has changed since, by one lstat each
// (statConflicts): so an edit the user made after the pull shows before
// an apply refuses it. A folder that cannot be opened leaves the pull's.
func (s *Store) List(workspace string) ([]Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, err := s.loadPending()
	if err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(workspace)
	if err == nil {
		defer root.Close()
	}
	entries := make([]Entry, len(m.Records))
	for i, r := range m.Records {
		entries[i] = r.Entry
		if root == nil || r.Conflict {
			continue
		}
		// As Apply reads it (mayOverwrite): a deletion of what the user
		// deleted too is none.
		c := statConflicts(root, r.Path, r.Base, m.Epoch, m.Written, r.Kind == Deleted)
		if !c && r.Kind == Renamed && r.FromBase != nil {
			c = statConflicts(root, r.From, *r.FromBase, m.Epoch, m.Written, true)
		}
		entries[i].Conflict = c
	}
	slices.SortFunc(entries, func(a, b Entry) int { return cmp.Compare(a.Path, b.Path) })
	return entries, nil
}

// Pending returns how many changes are pending.
func (s *Store) Pending() (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, err := s.loadPending()
	return len(m.Records), err
}

// Content opens the new content of a pending file (image previews).
func (s *Store) Content(p string) (io.ReadCloser, Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, err := s.loadPending()
	if err != nil {
		return nil, Entry{}, err
	}
	i := slices.IndexFunc(m.Records, func(r record) bool { return r.Path == p })
	if i < 0 || m.Records[i].Blob == "" {
		return nil, Entry{}, fmt.Errorf("changes: %s: no pending file there: %w", printable.String(p), fs.ErrNotExist)
	}
	f, err := os.Open(s.blobPath(m.Records[i].Blob))
	if err != nil {
		return nil, Entry{}, fmt.Errorf("changes: %w", err)
	}
	return f, m.Records[i].Entry, nil
}

// Discard drops the pending changes to paths, and to what is below them
// (all when none); their paths (a rename's both) join the forget list. It
// returns the paths discarded.
func (s *Store) Discard(paths []string) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, err := s.loadPending()
	if err != nil {
		return nil, err
	}
	var gone, forget []string
	keep := m.Records[:0:0]
	set := newPathSet(paths)
	for _, r := range m.Records {
		if len(paths) > 0 && !set.holds(r.Path) {
			keep = append(keep, r)
			continue
		}
		gone = append(gone, r.Path)
		forget = append(forget, r.Path)
		if r.From != "" {
			forget = append(forget, r.From)
		}
	}
	if len(gone) == 0 {
		return nil, nil
	}
	// The forget list first: a crash between the two leaves a path both
	// pending and forgotten, which the next Ingest drops, never one the
	// layer still holds that nothing lists.
	if err := s.addForgotten(forget); err != nil {
		return nil, err
	}
	m.Records = keep
	if err := s.savePending(m); err != nil {
		return nil, err
	}
	return gone, s.pruneBlobs(m)
}
