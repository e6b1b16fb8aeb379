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
	keepDirs := &folders{root: root}
	defer keepDirs.close()
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
		if keepByLink(root, keepDirs, st.Path, *st, dst) == nil {
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
func keepByLink(root *os.Root, dirs *folders, p string, want state, dst string) error {
	fi, err := root.Lstat(p)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() || linkCount(fi) != 1 || fi.Size() != want.Size || !fi.ModTime().Equal(want.ModTime) {
		return errors.ErrUnsupported
	}
	dir, err := dirs.get(path.Dir(p))
	if err != nil {
		return err
	}
	if err := linkOut(dir, path.Base(p), dst); err != nil {
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
