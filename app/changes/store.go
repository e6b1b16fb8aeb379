package changes

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/atomicfile"
	"github.com/airlock-sandbox/airlock/internal/filelock"
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
}

// pendingManifest is pending/manifest.json.
type pendingManifest struct {
	// Epoch is when the guest layer the changes come from began: a host
	// file changed after it may be one the guest never saw.
	Epoch   time.Time `json:"epoch"`
	Records []record  `json:"records"`
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
