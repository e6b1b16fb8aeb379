package changes

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/printable"
)

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
