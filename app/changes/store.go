package changes

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/atomicfile"
	"github.com/airlock-sandbox/airlock/internal/filelock"
	"github.com/airlock-sandbox/airlock/internal/printable"
)

// A workspace's store is one folder in the state folder:
//
//	lock                     held by the one process that uses the store
//	pending/manifest.json    the pending changes (pendingManifest)
//	pending/blobs/<sha256>   the new content of pending files
//	checkpoints/<id>/        one application: manifest.json, blobs/
//	journal.json             an apply or undo under way (see Recover)
//	forget.json              paths applied or discarded that the guest's
//	                         layer still holds (the next VM forgets them)
const (
	lockFile     = "lock"
	pendingDir   = "pending"
	manifestFile = "manifest.json"
	blobsDir     = "blobs"
	checkpoints  = "checkpoints"
	journalFile  = "journal.json"
	forgetFile   = "forget.json"
)

// DefaultLimit bounds a workspace's store (pending changes and
// checkpoints together) and its guest layer disk.
const DefaultLimit int64 = 8 << 30

// ErrInUse means another process has the workspace's store open.
var ErrInUse = errors.New("the workspace's changes are in use by another Airlock process " +
	"(the service's, or an airlock run on the same folder); stop it first")

// Options configure a store.
type Options struct {
	// Limit bounds pending changes and checkpoints together; the oldest
	// checkpoints go first, pending changes never. 0 is DefaultLimit.
	Limit int64
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// Store is one workspace's pending changes and checkpoints.
type Store struct {
	dir  string
	opts Options
	lock *filelock.Lock

	mu sync.Mutex // orders every call; the lock file orders processes

	// hook, in tests, runs before each change Apply, Undo and recovery
	// make to the host or the store (step); an error fails that change.
	hook func(op, path string) error
}

// record is a pending change as the store keeps it.
type record struct {
	Entry
	// Blob names the new content in blobs/ (files): its SHA-256, hex.
	Blob string `json:"blob,omitempty"`
	// Base is the host's path when the store first saw the change.
	Base Base `json:"base"`
	// FromBase is a rename's old path (From) when the store first saw it.
	FromBase *Base `json:"from_base,omitempty"`
}

// Base is what the host's path was: the change conflicts when it is no
// longer so at apply.
type Base struct {
	Exists  bool        `json:"exists"`
	Type    Type        `json:"type,omitempty"`
	Size    int64       `json:"size,omitempty"`
	Mode    fs.FileMode `json:"mode,omitempty"`
	ModTime time.Time   `json:"mtime,omitempty"`
	// Hash is the SHA-256 of a file's content, hex.
	Hash string `json:"hash,omitempty"`
	// Ino and Ctime identify the file whose content Hash is (identity),
	// when its last change was old enough for a write in the same clock
	// tick to show (clockSlack): while both still hold, the content is
	// Hash's without reading it (knownBase). Not part of same.
	Ino   uint64 `json:"ino,omitempty"`
	Ctime int64  `json:"ctime,omitempty"`
}

// pendingManifest is pending/manifest.json.
type pendingManifest struct {
	// Epoch is when the guest layer the changes come from began: a host
	// file changed after it may be one the guest never saw.
	Epoch   time.Time `json:"epoch"`
	Records []record  `json:"records"`
	// Written holds the host paths Airlock itself wrote (Apply, Undo) since
	// Epoch, as it left them: such a path changed after Epoch, but while
	// it is still exactly so, not by the user (see noteWritten).
	Written map[string]written `json:"written,omitempty"`
}

// written is a host path as Airlock left it.
type written struct {
	Base
	// Changed is when it last changed (hostState.changed): the ctime too,
	// on unix, which the user's next change moves.
	Changed time.Time `json:"changed"`
}

// noteWritten records that Airlock has just written the host's path p
// (Apply, Undo), hash being a file's content (known, so not read again):
// the guest's layer sees that version only after Airlock wrote it, so a
// later change there conflicts only if the path is no longer so. Apply
// and Undo call it for each path they write, then save m.
func (m *pendingManifest) noteWritten(root *os.Root, p, hash string) error {
	fi, err := root.Lstat(filepath.FromSlash(p))
	return m.noteStat(p, fi, err, hash)
}

// noteStat is noteWritten with p's Lstat (fi, err) already made.
func (m *pendingManifest) noteStat(p string, fi fs.FileInfo, err error, hash string) error {
	if notExist(err) {
		delete(m.Written, p)
		return nil
	}
	if err != nil {
		return fmt.Errorf("changes: %w", err)
	}
	st := stateOf(fi)
	st.Hash = hash
	if m.Written == nil {
		m.Written = map[string]written{}
	}
	m.Written[p] = written{st.Base, st.changed}
	return nil
}

// Open opens (creating) the store in dir, takes its lock, and finishes or
// rolls back an apply or undo a crash interrupted.
func Open(dir string, opts Options) (*Store, error) {
	if opts.Limit <= 0 {
		opts.Limit = DefaultLimit
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	for _, d := range []string{dir, filepath.Join(dir, pendingDir, blobsDir), filepath.Join(dir, checkpoints)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("changes: %w", err)
		}
	}
	l, err := filelock.TryLock(filepath.Join(dir, lockFile))
	if errors.Is(err, filelock.ErrLocked) {
		return nil, fmt.Errorf("changes: %s: %w", dir, ErrInUse)
	}
	if err != nil {
		return nil, fmt.Errorf("changes: %w", err)
	}
	s := &Store{dir: dir, opts: opts, lock: l}
	if err := s.recover(); err != nil {
		_ = l.Unlock()
		return nil, err
	}
	return s, nil
}

// Close releases the store's lock.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lock.Unlock()
}

func (s *Store) loadPending() (pendingManifest, error) {
	var m pendingManifest
	b, err := os.ReadFile(filepath.Join(s.dir, pendingDir, manifestFile))
	if errors.Is(err, fs.ErrNotExist) {
		return m, nil
	}
	if err == nil {
		err = json.Unmarshal(b, &m)
	}
	if err != nil {
		return m, fmt.Errorf("changes: pending manifest: %w", err)
	}
	return m, nil
}

func (s *Store) savePending(m pendingManifest) error {
	b, err := json.Marshal(m)
	if err == nil {
		err = atomicfile.Write(filepath.Join(s.dir, pendingDir, manifestFile), b, 0o600, atomicfile.Synced)
	}
	if err != nil {
		return fmt.Errorf("changes: pending manifest: %w", err)
	}
	return nil
}

func (s *Store) blobPath(hash string) string {
	return filepath.Join(s.dir, pendingDir, blobsDir, hash)
}

// Forgotten returns the paths applied or discarded since the guest's
// layer last forgot them.
func (s *Store) Forgotten() ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.loadForgotten()
}

// ClearForgotten empties the forget list, once the guest's layer has
// forgotten those paths (or was wiped).
func (s *Store) ClearForgotten() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := os.Remove(filepath.Join(s.dir, forgetFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("changes: forget list: %w", err)
	}
	return nil
}

func (s *Store) loadForgotten() ([]string, error) {
	var paths []string
	b, err := os.ReadFile(filepath.Join(s.dir, forgetFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err == nil {
		err = json.Unmarshal(b, &paths)
	}
	if err != nil {
		return nil, fmt.Errorf("changes: forget list: %w", err)
	}
	return paths, nil
}

// addForgotten adds paths to the forget list; the caller holds s.mu.
func (s *Store) addForgotten(paths []string) error {
	have, err := s.loadForgotten()
	if err != nil {
		return err
	}
	seen := make(map[string]bool, len(have))
	for _, p := range have {
		seen[p] = true
	}
	for _, p := range paths {
		if !seen[p] {
			seen[p] = true
			have = append(have, p)
		}
	}
	b, err := json.Marshal(have)
	if err == nil {
		err = atomicfile.Write(filepath.Join(s.dir, forgetFile), b, 0o600, atomicfile.Synced)
	}
	if err != nil {
		return fmt.Errorf("changes: forget list: %w", err)
	}
	return nil
}

// pruneBlobs removes the blobs (and temporary files) in pending/blobs/ that
// no record of m names.
func (s *Store) pruneBlobs(m pendingManifest) error {
	keep := make(map[string]bool, len(m.Records))
	for _, r := range m.Records {
		keep[r.Blob] = true
	}
	des, err := os.ReadDir(s.blobPath(""))
	for _, de := range des {
		if !keep[de.Name()] {
			err = errors.Join(err, os.Remove(s.blobPath(de.Name())))
		}
	}
	if err != nil {
		return fmt.Errorf("changes: pending blobs: %w", err)
	}
	return nil
}

// hostState is what a host path is now, and when it last changed: the
// later of its mtime and, on unix, its ctime.
type hostState struct {
	Base
	changed time.Time
}

// hostBase returns what the host's path p (slash-separated) is now beneath
// root. A symlink is not followed.
func hostBase(root *os.Root, p string) (hostState, error) {
	fi, err := root.Lstat(filepath.FromSlash(p))
	if notExist(err) {
		return hostState{}, nil
	}
	if err != nil {
		return hostState{}, err
	}
	st := stateOf(fi)
	if st.Type == File {
		if st.Hash, err = hashFile(root, p, fi); err != nil {
			return hostState{}, err
		}
		// The identity read before the content: a write since moves it.
		if ino, ctime := identity(fi); ino != 0 && time.Unix(0, ctime).Before(time.Now().Add(-clockSlack)) {
			st.Ino, st.Ctime = ino, ctime
		}
	}
	return st, nil
}

// knownBase is hostBase for a path whose Base is known: a file that is
// still the one base identifies (same inode and change time, so nothing
// has written it since its hash was read) takes base's hash unread. A
// device, fifo or socket is an error, as lstate makes it.
func knownBase(root *os.Root, p string, base Base) (hostState, error) {
	fi, err := root.Lstat(filepath.FromSlash(p))
	if notExist(err) {
		return hostState{}, nil
	}
	if err != nil {
		return hostState{}, err
	}
	if _, ok := typeOf(fi.Mode()); !ok {
		return hostState{}, fmt.Errorf("the host has a device, fifo or socket at %s, which Airlock never replaces", printable.String(p))
	}
	st := stateOf(fi)
	if st.Type != File {
		return st, nil
	}
	if ino, ctime := identity(fi); base.Ino != 0 && ino == base.Ino && ctime == base.Ctime && st.same(Base{Exists: true, Type: File, Size: base.Size, Mode: base.Mode, ModTime: base.ModTime}) {
		st.Hash, st.Ino, st.Ctime = base.Hash, ino, ctime
		return st, nil
	}
	if st.Hash, err = hashFile(root, p, fi); err != nil {
		return hostState{}, err
	}
	return st, nil
}

// stateOf is what fi says of a path, all but a file's hash.
func stateOf(fi fs.FileInfo) hostState {
	b := Base{Exists: true, Mode: fi.Mode().Perm(), ModTime: fi.ModTime()}
	switch {
	case fi.Mode().IsRegular():
		b.Type, b.Size = File, fi.Size()
	case fi.IsDir():
		b.Type = Dir
	case fi.Mode()&fs.ModeSymlink != 0:
		b.Type = Symlink
	default:
		b.Type = "other"
	}
	changed := fi.ModTime()
	if ct := changeTime(fi); ct.After(changed) {
		changed = ct
	}
	return hostState{b, changed}
}

// hashFile returns the SHA-256 of the host's file p, which must still be
// the file fi.
func hashFile(root *os.Root, p string, fi fs.FileInfo) (string, error) {
	f, err := root.Open(filepath.FromSlash(p))
	if err != nil {
		return "", err
	}
	defer f.Close()
	if now, err := f.Stat(); err != nil || !os.SameFile(fi, now) {
		return "", fmt.Errorf("%s changed while it was read", p)
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// same reports whether two states of a path are the same.
func (b Base) same(o Base) bool {
	return b.Exists == o.Exists && b.Type == o.Type && b.Size == o.Size &&
		b.Mode == o.Mode && b.ModTime.Equal(o.ModTime) && b.Hash == o.Hash
}

// clockSlack widens "after epoch": file systems keep times coarser than
// the clock that took the epoch (the kernel's coarse clock lags by a tick;
// FAT keeps mtimes to 2 s), so a change made just after the epoch may carry
// a time just before it.
const clockSlack = 2 * time.Second

// maxConflictWalk bounds the host entries conflicts reads below a folder
// that a change removes; beyond it the change conflicts.
const maxConflictWalk = 100_000

// conflicts reports whether the user may have changed the host's path p
// after the guest first saw it: p (now, from hostBase) is no longer base,
// or it (or, when the change removes the folder p, anything below it)
// changed after epoch (less clockSlack), unless it is still exactly what
// Airlock wrote there (wrote, a manifest's Written).
//
// The guest could first read a host file at any time after its layer
// began (epoch), and the host cannot know when it did: so any change after
// epoch may be one the guest never saw, and only a path untouched since
// epoch is safe to overwrite. Times alone are not enough: mtime is set
// back by tools (touch -d, tar, rsync -t), which is why ctime, which no
// tool can set, counts too; and a path already pending must also still be
// what it was when the store first saw it (base), whatever its times say.
// A change this reading calls a conflict may be none (a chmod, an editor
// that saves the same bytes), and costs a review; the reverse would cost
// the user's edit.
func conflicts(root *os.Root, p string, base Base, now hostState, epoch time.Time, removes bool, wrote map[string]written) (bool, error) {
	if touched(p, base, now, epoch, wrote) {
		return true, nil
	}
	if !removes || now.Type != Dir {
		return false, nil
	}
	epoch = epoch.Add(-clockSlack)
	n := 0
	conflict := false
	err := fs.WalkDir(root.FS(), p, func(q string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if n++; n > maxConflictWalk {
			conflict = true
			return fs.SkipAll
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if fi.ModTime().After(epoch) || changeTime(fi).After(epoch) {
			conflict = true
			return fs.SkipAll
		}
		return nil
	})
	return conflict, err
}

// touched is conflicts' reading of the path p itself (not what is below
// it): now is no longer base, or it changed after epoch and is not
// exactly what Airlock wrote there.
func touched(p string, base Base, now hostState, epoch time.Time, wrote map[string]written) bool {
	if !now.same(base) {
		return true
	}
	if w, ok := wrote[p]; ok && w.same(now.Base) && w.Changed.Equal(now.changed) {
		return false
	}
	return now.changed.After(epoch.Add(-clockSlack))
}

// statConflicts is conflicts by one lstat of p, for List: a file's
// content is taken to be its Base's (a change to it moves its ctime,
// which counts), and what is below a folder is not read. What it misses
// Apply finds, reading the file and walking the folder. gone says a path
// no longer there is no conflict (a deletion, a rename's old path).
func statConflicts(root *os.Root, p string, base Base, epoch time.Time, wrote map[string]written, gone bool) bool {
	fi, err := root.Lstat(filepath.FromSlash(p))
	var now hostState
	switch {
	case notExist(err):
		if gone {
			return false
		}
	case err != nil:
		return true // unreadable, so not known to be unchanged
	default:
		now = stateOf(fi)
	}
	if now.Type == File && base.Type == File {
		now.Hash = base.Hash
	}
	if w, ok := wrote[p]; ok && now.Type == File {
		// Airlock's own write of the same size, mode and times, which a
		// content change would have moved the ctime of.
		w.Hash = now.Hash
		wrote = map[string]written{p: w}
	}
	return touched(p, base, now, epoch, wrote)
}

// notExist reports whether err says a path does not exist, also when one
// of its folders is a file.
func notExist(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}
