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
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/atomicfile"
	"github.com/airlock-sandbox/airlock/internal/printable"
)

// state is one host path's state: in a checkpoint, before the apply
// (with its content in blobs/) and after it (to tell whether the user has
// changed the path since).
type state struct {
	Path    string      `json:"path"`
	Exists  bool        `json:"exists"`
	Type    Type        `json:"type,omitempty"`
	Mode    fs.FileMode `json:"mode,omitempty"`
	Size    int64       `json:"size,omitempty"`
	ModTime time.Time   `json:"mtime,omitzero"`
	Link    string      `json:"link,omitempty"`
	// Blob names the file's content in the checkpoint's blobs/; "" for a
	// file whose content the apply leaves alone (a mode change).
	Blob string `json:"blob,omitempty"`
	// Hash is a file's SHA-256 when known: the content kept (before) or
	// written (after).
	Hash string `json:"hash,omitempty"`
	// Parent marks a folder the apply only wrote into: only its
	// modification time is restored.
	Parent bool `json:"parent,omitempty"`
	// Ino and Ctime identify a file as the apply left it (see identity):
	// while both hold, Undo need not read it to know it is unchanged.
	Ino   uint64 `json:"ino,omitempty"`
	Ctime int64  `json:"ctime,omitempty"`
}

// cpManifest is checkpoints/<id>/manifest.json.
type cpManifest struct {
	Checkpoint
	// Complete is set once the apply has finished; a checkpoint without
	// it and without a journal naming it is debris of a crash before any
	// host file changed.
	Complete bool `json:"complete"`
	// Forget lists the paths the guest's layer forgets once applied.
	Forget []string `json:"forget,omitempty"`
	Before []state  `json:"before"`
	After  []state  `json:"after,omitempty"`
}

func (s *Store) cpDir(id string) string { return filepath.Join(s.dir, checkpoints, id) }

func (s *Store) loadCheckpoint(id string) (cpManifest, error) {
	var m cpManifest
	if !validID(id) {
		return m, fmt.Errorf("changes: no checkpoint %q", printable.String(id))
	}
	b, err := os.ReadFile(filepath.Join(s.cpDir(id), manifestFile))
	if errors.Is(err, fs.ErrNotExist) {
		return m, fmt.Errorf("changes: no checkpoint %q (airlock checkpoints lists them)", id)
	}
	if err == nil {
		err = json.Unmarshal(b, &m)
	}
	if err != nil {
		return m, fmt.Errorf("changes: checkpoint %s: %w", id, err)
	}
	return m, nil
}

func (s *Store) saveCheckpoint(m cpManifest) error {
	b, err := json.Marshal(m)
	if err == nil {
		err = atomicfile.Write(filepath.Join(s.cpDir(m.ID), manifestFile), b, 0o600, atomicfile.Synced)
	}
	if err != nil {
		return fmt.Errorf("changes: checkpoint %s: %w", m.ID, err)
	}
	return nil
}

// listCheckpoints reads every checkpoint's manifest, newest first.
func (s *Store) listCheckpoints() ([]cpManifest, error) {
	des, err := os.ReadDir(filepath.Join(s.dir, checkpoints))
	if err != nil {
		return nil, fmt.Errorf("changes: %w", err)
	}
	var out []cpManifest
	for _, de := range des {
		if !de.IsDir() || !validID(de.Name()) {
			continue
		}
		m, err := s.loadCheckpoint(de.Name())
		if err != nil {
			continue // debris of a crash before the manifest: recover removes it
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Time.Equal(out[j].Time) {
			return out[i].Time.After(out[j].Time)
		}
		return out[i].ID > out[j].ID
	})
	return out, nil
}

// newCheckpointID names a checkpoint by its time (sortable, readable on a
// command line), with a counter when two fall in one millisecond.
func (s *Store) newCheckpointID(now time.Time) string {
	base := now.UTC().Format("20060102-150405.000")
	id := base
	for n := 2; ; n++ {
		if _, err := os.Lstat(s.cpDir(id)); errors.Is(err, fs.ErrNotExist) {
			return id
		}
		id = fmt.Sprintf("%s-%d", base, n)
	}
}

// validID says whether id could name a checkpoint folder (never a path).
func validID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, c := range id {
		if (c < '0' || c > '9') && c != '-' && c != '.' {
			return false
		}
	}
	return !strings.Contains(id, "..")
}

// lstate reads the host path p as a state (no content).
func lstate(root *os.Root, p string) (state, error) {
	fi, err := root.Lstat(p)
	if notExist(err) {
		return state{Path: p}, nil
	}
	if err != nil {
		return state{}, err
	}
	t, ok := typeOf(fi.Mode())
	if !ok {
		return state{}, fmt.Errorf("the host has a device, fifo or socket at %s, which Airlock never replaces", printable.String(p))
	}
	st := state{Path: p, Exists: true, Type: t, Mode: fi.Mode().Perm(), ModTime: fi.ModTime()}
	switch t {
	case File:
		st.Size = fi.Size()
		st.Ino, st.Ctime = identity(fi)
	case Symlink:
		if st.Link, err = root.Readlink(p); err != nil {
			return state{}, err
		}
	}
	return st, nil
}

// lstateTree reads p and, if it is a folder, everything beneath it.
func lstateTree(root *os.Root, p string) ([]state, error) {
	st, err := lstate(root, p)
	if err != nil || !st.Exists || st.Type != Dir {
		return []state{st}, err
	}
	out := []state{st}
	des, err := readDir(root, p)
	if err != nil {
		return nil, err
	}
	for _, name := range des {
		sub, err := lstateTree(root, path.Join(p, name))
		if err != nil {
			return nil, err
		}
		out = append(out, sub...)
	}
	return out, nil
}

// readDir lists a folder beneath root without following symlinks.
func readDir(root *os.Root, p string) ([]string, error) {
	f, err := root.OpenFile(p, os.O_RDONLY|noFollow, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	slices.Sort(names)
	return names, err
}

// keepContent copies the host file p into the checkpoint's file dst,
// synced unless a file-system sync follows, and returns its SHA-256.
func keepContent(root *os.Root, p string, want state, dst string) (string, error) {
	src, err := root.OpenFile(p, os.O_RDONLY|noFollow, 0)
	if err != nil {
		return "", err
	}
	defer src.Close()
	if fi, err := src.Stat(); err != nil || fi.Size() != want.Size || !fi.ModTime().Equal(want.ModTime) {
		return "", fmt.Errorf("%s changed while Airlock read it; try again", printable.String(p))
	}
	h := sha256.New()
	if err := copyTo(dst, io.TeeReader(src, h), want.Size); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// keepByLink makes the checkpoint's file dst a hard link to the host file
// p, when p has no other name (else a write through that name would
// change the kept version): the apply renames over p or removes it, so
// the kept version is then the checkpoint's alone, and no bytes move. It
// fails when that cannot be (another file system, Windows); the caller
// copies then.
func keepByLink(root *os.Root, p string, want state, dst string) error {
	fi, err := root.Lstat(p)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() || linkCount(fi) != 1 || fi.Size() != want.Size || !fi.ModTime().Equal(want.ModTime) {
		return errors.ErrUnsupported
	}
	dir, err := root.Open(path.Dir(p))
	if err != nil {
		return err
	}
	err = linkOut(dir, path.Base(p), dst)
	dir.Close()
	if err != nil {
		return err
	}
	if kept, err := os.Lstat(dst); err != nil || !os.SameFile(fi, kept) {
		os.Remove(dst)
		return errors.ErrUnsupported
	}
	return nil
}

// copyTo writes exactly size bytes from r into a new file at the host
// path dst (outside any workspace: the store's own folder).
func copyTo(dst string, r io.Reader, size int64) error {
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	n, err := io.Copy(f, r)
	if err == nil && n != size {
		err = fmt.Errorf("read %d bytes, want %d", n, size)
	}
	if err == nil && perFileSync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// tempName is where the content for p is written before it is renamed
// over p: beside it, hidden, named by the checkpoint so that a recovery
// finds and removes it.
func tempName(id, p string) string {
	sum := sha256.Sum256([]byte(p))
	return path.Join(path.Dir(p), ".airlock-"+id+"-"+hex.EncodeToString(sum[:8])+".tmp")
}

// writeHostFile writes size bytes from src to the temporary file beside
// p, with mode and mtime set, synced when each file syncs alone; the
// caller renames it over p. A temporary left by a crash is replaced.
func (s *Store) writeHostFile(root *os.Root, tmp string, src io.Reader, size int64, mode fs.FileMode, mtime time.Time) error {
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|noFollow, 0o600)
	if errors.Is(err, fs.ErrExist) {
		_ = root.Remove(tmp)
		f, err = root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|noFollow, 0o600)
	}
	if err != nil {
		return err
	}
	err = asFolderOwner(root, tmp)
	var n int64
	if err == nil {
		n, err = io.Copy(f, src)
	}
	if err == nil && n != size {
		err = fmt.Errorf("content of %s is %d bytes, want %d: the store is damaged", printable.String(tmp), n, size)
	}
	if err == nil {
		err = f.Chmod(mode.Perm())
	}
	if err == nil && perFileSync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Chtimes(tmp, mtime, mtime)
	}
	if err != nil {
		_ = root.Remove(tmp)
	}
	return err
}

// linkHostFile makes the temporary tmp a hard link to the store's file
// src (a pending blob no other change names, so nothing else reads or
// writes it), with mode and mtime set: no bytes move when the store and
// the folder share a file system. It fails when they do not (the caller
// copies then).
func (s *Store) linkHostFile(root *os.Root, tmp, src string, size int64, mode fs.FileMode, mtime time.Time) error {
	dir, err := root.Open(path.Dir(tmp))
	if err != nil {
		return err
	}
	defer dir.Close()
	err = linkInto(dir, path.Base(tmp), src)
	if errors.Is(err, fs.ErrExist) {
		_ = root.Remove(tmp)
		err = linkInto(dir, path.Base(tmp), src)
	}
	if err != nil {
		return err
	}
	fi, err := root.Lstat(tmp)
	if err == nil && (!fi.Mode().IsRegular() || fi.Size() != size) {
		err = fmt.Errorf("content of %s is %d bytes, want %d: the store is damaged", printable.String(tmp), fi.Size(), size)
	}
	if err == nil {
		err = asFolderOwner(root, tmp)
	}
	if err == nil {
		err = root.Chmod(tmp, mode.Perm())
	}
	if err == nil {
		err = root.Chtimes(tmp, mtime, mtime)
	}
	if err == nil && perFileSync {
		var f *os.File
		if f, err = root.OpenFile(tmp, os.O_RDONLY|noFollow, 0); err == nil {
			err = f.Sync()
			f.Close()
		}
	}
	if err != nil {
		_ = root.Remove(tmp)
	}
	return err
}

// syncTree makes what was written beneath root (and in the store) durable.
func (s *Store) syncTree(root *os.Root, dirs []string) error {
	if !perFileSync {
		f, err := root.Open(".")
		if err != nil {
			return err
		}
		err = syncFS(f)
		f.Close()
		if err != nil {
			return err
		}
		d, err := os.Open(s.dir)
		if err != nil {
			return err
		}
		defer d.Close()
		return syncFS(d)
	}
	for _, dir := range dirs {
		if f, err := root.Open(dir); err == nil {
			_ = f.Sync() // folders cannot be synced on Windows
			f.Close()
		}
	}
	return nil
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

// restore puts every path of before back as it was: blobs holds the
// content, id names the temporaries to clear. It is idempotent, so a
// recovery interrupted in turn runs it again.
func (s *Store) restore(root *os.Root, id, blobs string, before []state) error {
	sorted := slices.Clone(before)
	slices.SortFunc(sorted, func(a, b state) int { return strings.Compare(a.Path, b.Path) })
	// Deepest first: clear temporaries, remove what did not exist and what
	// has the wrong type (children before their folder).
	for i := len(sorted) - 1; i >= 0; i-- {
		b := sorted[i]
		if b.Parent {
			continue
		}
		if err := s.step("remove", tempName(id, b.Path)); err != nil {
			return err
		}
		if err := root.Remove(tempName(id, b.Path)); err != nil && !notExist(err) {
			return err
		}
		cur, err := lstate(root, b.Path)
		if err != nil {
			return err
		}
		if !cur.Exists || (b.Exists && cur.Type == b.Type) {
			continue
		}
		if err := s.step("remove", b.Path); err != nil {
			return err
		}
		if err := root.Remove(b.Path); err != nil && !notExist(err) {
			return fmt.Errorf("remove %s: %w", printable.String(b.Path), err)
		}
	}
	// Shallowest first: folders, then their files and links.
	for _, b := range sorted {
		if b.Parent || !b.Exists {
			continue
		}
		if err := s.restoreOne(root, id, blobs, b); err != nil {
			return fmt.Errorf("restore %s: %w", printable.String(b.Path), err)
		}
	}
	var dirs []string
	for _, b := range sorted {
		if b.Exists && b.Type == Dir {
			dirs = append(dirs, b.Path)
		}
	}
	if err := s.syncTree(root, dirs); err != nil {
		return err
	}
	// Deepest first, once nothing more is written into them: folders'
	// times.
	for i := len(sorted) - 1; i >= 0; i-- {
		b := sorted[i]
		if !b.Exists || b.Type != Dir {
			continue
		}
		if err := s.step("chtimes", b.Path); err != nil {
			return err
		}
		if err := root.Chtimes(b.Path, b.ModTime, b.ModTime); err != nil && !(b.Parent && notExist(err)) {
			return err
		}
	}
	return nil
}

func (s *Store) restoreOne(root *os.Root, id, blobs string, b state) error {
	cur, err := lstate(root, b.Path)
	if err != nil {
		return err
	}
	switch b.Type {
	case Dir:
		if !cur.Exists {
			if err := s.step("mkdir", b.Path); err != nil {
				return err
			}
			if err := root.Mkdir(b.Path, 0o700); err != nil {
				return err
			}
			if err := asFolderOwner(root, b.Path); err != nil {
				return err
			}
		}
		if cur.Mode != b.Mode || !cur.Exists {
			if err := s.step("chmod", b.Path); err != nil {
				return err
			}
			return root.Chmod(b.Path, b.Mode)
		}
		return nil
	case Symlink:
		if cur.Exists && cur.Type == Symlink && cur.Link == b.Link {
			return nil
		}
		tmp := tempName(id, b.Path)
		if err := s.step("symlink", tmp); err != nil {
			return err
		}
		_ = root.Remove(tmp)
		if err := root.Symlink(b.Link, tmp); err != nil {
			return err
		}
		if err := asFolderOwner(root, tmp); err != nil {
			return err
		}
		if !b.ModTime.IsZero() {
			if err := setLinkTime(root, tmp, b.ModTime); err != nil {
				return err
			}
		}
		if err := s.step("rename", b.Path); err != nil {
			return err
		}
		return root.Rename(tmp, b.Path)
	}
	var kept fs.FileInfo
	if b.Blob != "" {
		if kept, err = os.Stat(filepath.Join(blobs, b.Blob)); err != nil {
			return err
		}
		if fi, err := root.Lstat(b.Path); err == nil && os.SameFile(fi, kept) {
			b.Blob = "" // kept by a link and not replaced yet: it is still there
		}
	}
	if b.Blob == "" { // content untouched: only the mode and time
		if cur.Mode != b.Mode {
			if err := s.step("chmod", b.Path); err != nil {
				return err
			}
			if err := root.Chmod(b.Path, b.Mode); err != nil {
				return err
			}
		}
		if !cur.ModTime.Equal(b.ModTime) {
			if err := s.step("chtimes", b.Path); err != nil {
				return err
			}
			return root.Chtimes(b.Path, b.ModTime, b.ModTime)
		}
		return nil
	}
	if cur.Exists && cur.Size == b.Size && cur.Mode == b.Mode && cur.ModTime.Equal(b.ModTime) {
		// Unchanged (the crash came before this path): compare the bytes
		// to be sure, since a guest can choose a size and a time.
		same, err := sameBytes(root, b.Path, filepath.Join(blobs, b.Blob))
		if err != nil || same {
			return err
		}
	}
	src, err := os.Open(filepath.Join(blobs, b.Blob))
	if err != nil {
		return err
	}
	defer src.Close()
	tmp := tempName(id, b.Path)
	if err := s.step("write", tmp); err != nil {
		return err
	}
	// The kept file's own size, not b.Size: should a program that had
	// the file open have written to it since (Undo refuses that up
	// front), a recovery still finishes.
	if err := s.writeHostFile(root, tmp, src, kept.Size(), b.Mode, b.ModTime); err != nil {
		return err
	}
	if err := s.step("rename", b.Path); err != nil {
		return err
	}
	return root.Rename(tmp, b.Path)
}

// sameBytes compares the host file p with the store's file blob.
func sameBytes(root *os.Root, p, blob string) (bool, error) {
	a, err := hashHostFile(root, p)
	if err != nil {
		return false, err
	}
	f, err := os.Open(blob)
	if err != nil {
		return false, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return false, err
	}
	return a == hex.EncodeToString(h.Sum(nil)), nil
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
