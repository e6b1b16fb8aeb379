package changes

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"time"

	"github.com/airlock-sandbox/airlock/internal/printable"
)

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
	// The write loop makes folders and temporaries only: a folder made or
	// found is one until the renames below.
	madeDir := map[string]bool{}
	linkDirs := &folders{root: root}
	defer linkDirs.close()
	for _, r := range take {
		if r.Kind == Deleted || r.Kind == ModeOnly {
			continue
		}
		for _, a := range ancestors(r.Path) {
			if madeDir[a] {
				continue
			}
			if err := s.mkdir(root, a); err != nil {
				return err
			}
			madeDir[a] = true
		}
		dirs = append(dirs, path.Dir(r.Path))
		switch r.Type {
		case Dir:
			if err := s.mkdir(root, r.Path); err != nil {
				return err
			}
			madeDir[r.Path] = true
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
			if linkable[r.Blob] && s.linkHostFile(root, linkDirs, tmp, s.blobPath(r.Blob), r.Size, r.Mode, r.ModTime) == nil {
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
	linkDirs.close()
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
// copies then). The file's size, mode and time are checked and set by its
// path in the store, the same inode as tmp's: no walk beneath root for
// each.
func (s *Store) linkHostFile(root *os.Root, dirs *folders, tmp, src string, size int64, mode fs.FileMode, mtime time.Time) error {
	fi, err := os.Lstat(src)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() || fi.Size() != size {
		return fmt.Errorf("content of %s is %d bytes, want %d: the store is damaged", printable.String(tmp), fi.Size(), size)
	}
	dir, err := dirs.get(path.Dir(tmp))
	if err != nil {
		return err
	}
	err = linkInto(dir, path.Base(tmp), src)
	if errors.Is(err, fs.ErrExist) {
		_ = root.Remove(tmp)
		err = linkInto(dir, path.Base(tmp), src)
	}
	if err != nil {
		return err
	}
	err = asFolderOwner(root, tmp)
	if err == nil {
		err = os.Chmod(src, mode.Perm())
	}
	if err == nil {
		err = os.Chtimes(src, mtime, mtime)
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

// folders are the folders beneath root an apply writes into or keeps
// from, each opened once (os.Root.Open, so beneath root) for the links
// made relative to it: a file is linked where Apply checked it, whatever
// a parent folder becomes since.
type folders struct {
	root *os.Root
	open map[string]*os.File
}

// maxOpenFolders bounds the descriptors folders holds; past it, it closes
// them all and starts again (paths come sorted, so a folder's files come
// together).
const maxOpenFolders = 64

func (f *folders) get(dir string) (*os.File, error) {
	if d, ok := f.open[dir]; ok {
		return d, nil
	}
	if len(f.open) >= maxOpenFolders {
		f.close()
	}
	d, err := f.root.Open(dir)
	if err != nil {
		return nil, err
	}
	if f.open == nil {
		f.open = map[string]*os.File{}
	}
	f.open[dir] = d
	return d, nil
}

func (f *folders) close() {
	for _, d := range f.open {
		d.Close()
	}
	f.open = nil
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
