package changes

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/aymanbagabas/go-udiff"

	"github.com/airlock-sandbox/airlock/internal/printable"
)

const (
	// sniffBytes of a file decide whether it is text.
	sniffBytes = 8 << 10
	// maxDiffBytes bounds a file Diff and Ingest compare line by line;
	// a larger one gets a summary line, like a binary file.
	maxDiffBytes = 1 << 20
)

// isText reports whether b's first sniffBytes are UTF-8 without NUL.
func isText(b []byte) bool {
	if len(b) > sniffBytes {
		b = b[:sniffBytes]
		// A character the cut splits is not a fault.
		for i := 0; i < utf8.UTFMax-1 && !utf8.Valid(b); i++ {
			b = b[:len(b)-1]
		}
	}
	return utf8.Valid(b) && bytes.IndexByte(b, 0) < 0
}

// readText returns the content of a file of size bytes when it is text of
// at most maxDiffBytes; ok is false otherwise.
func readText(open func() (io.ReadCloser, error), size int64) (string, bool, error) {
	if size > maxDiffBytes {
		return "", false, nil
	}
	f, err := open()
	if err != nil {
		return "", false, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxDiffBytes+1))
	if err != nil || len(b) > maxDiffBytes || !isText(b) {
		return "", false, err
	}
	return string(b), true, nil
}

// countLines counts the lines new adds to old and removes from it.
func countLines(old, new string) (added, removed int) {
	u, err := udiff.ToUnifiedDiff("", "", old, udiff.Lines(old, new), 0)
	if err != nil {
		return 0, 0 // cannot happen: the edits come from old
	}
	for _, h := range u.Hunks {
		for _, l := range h.Lines {
			switch l.Kind {
			case udiff.Insert:
				added++
			case udiff.Delete:
				removed++
			}
		}
	}
	return added, removed
}

// Diff writes a unified diff of the pending changes to paths (all when
// none) against the host's files in workspace: text files line by line,
// anything else in one summary line.
//
// The output is like git's (a/ and b/ names, /dev/null for a side that is
// absent, mode and rename lines), with every character a terminal might
// act on escaped (internal/printable) except tabs: names and content are
// the guest's.
func (s *Store) Diff(workspace string, paths []string, w io.Writer) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, err := s.loadPending()
	if err != nil {
		return err
	}
	for _, p := range paths {
		one := pathSet{p: true}
		if !slices.ContainsFunc(m.Records, func(r record) bool { return one.holds(r.Path) }) {
			return fmt.Errorf("changes: %s: no pending change there: %w", printable.String(p), fs.ErrNotExist)
		}
	}
	root, err := os.OpenRoot(workspace)
	if err != nil {
		return fmt.Errorf("changes: workspace: %w", err)
	}
	defer root.Close()
	bw := bufio.NewWriter(w)
	set := newPathSet(paths)
	for _, r := range m.Records {
		if len(paths) > 0 && !set.holds(r.Path) {
			continue
		}
		if err := s.diffOne(bw, root, r); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// version is one side of a diff.
type version struct {
	typ  Type // "" when absent
	mode fs.FileMode
	size int64
	text bool
	data string // a text file's content, a symlink's target
}

func (v version) content() bool { return v.typ == File || v.typ == Symlink }

func (s *Store) diffOne(w io.Writer, root *os.Root, r record) error {
	oldPath := r.Path
	if r.Kind == Renamed {
		oldPath = r.From
	}
	old, err := hostVersion(root, oldPath)
	if err != nil {
		return fmt.Errorf("changes: %s: %w", printable.String(oldPath), err)
	}
	new, err := s.newVersion(r)
	if err != nil {
		return fmt.Errorf("changes: %s: %w", printable.String(r.Path), err)
	}
	a, b := "a/"+printable.String(oldPath), "b/"+printable.String(r.Path)
	fmt.Fprintf(w, "diff --git %s %s\n", a, b)
	if r.Kind == Renamed {
		fmt.Fprintf(w, "rename from %s\nrename to %s\n", printable.String(r.From), printable.String(r.Path))
	}
	switch {
	case old.typ == "":
		fmt.Fprintf(w, "new file mode %06o\n", gitMode(new))
	case new.typ == "":
		fmt.Fprintf(w, "deleted file mode %06o\n", gitMode(old))
	case gitMode(old) != gitMode(new):
		fmt.Fprintf(w, "old mode %06o\nnew mode %06o\n", gitMode(old), gitMode(new))
	}
	if !old.content() && !new.content() {
		return nil // folders
	}
	if !old.content() {
		a = "/dev/null"
	}
	if !new.content() {
		b = "/dev/null"
	}
	if (old.content() && !old.text) || (new.content() && !new.text) {
		_, err := fmt.Fprintf(w, "Binary files %s and %s differ (%s -> %s)\n", a, b, humanBytes(old.size), humanBytes(new.size))
		return err
	}
	_, err = io.WriteString(w, escapeLines(udiff.Unified(a, b, old.data, new.data)))
	return err
}

// hostVersion reads the host's path p for a diff; symlinks are not
// followed.
func hostVersion(root *os.Root, p string) (version, error) {
	fi, err := root.Lstat(filepath.FromSlash(p))
	if notExist(err) {
		return version{}, nil
	}
	if err != nil {
		return version{}, err
	}
	v := version{mode: fi.Mode().Perm(), size: fi.Size()}
	switch {
	case fi.Mode().IsRegular():
		v.typ = File
		v.data, v.text, err = readText(func() (io.ReadCloser, error) { return root.Open(filepath.FromSlash(p)) }, fi.Size())
	case fi.Mode()&fs.ModeSymlink != 0:
		v.typ, v.text = Symlink, true
		v.data, err = root.Readlink(filepath.FromSlash(p))
	case fi.IsDir():
		v.typ = Dir
	default:
		v.typ = "other"
	}
	return v, err
}

// newVersion reads a record's new side for a diff.
func (s *Store) newVersion(r record) (version, error) {
	v := version{typ: r.Type, mode: r.Mode, size: r.Size}
	var err error
	switch r.Type {
	case File:
		v.data, v.text, err = readText(func() (io.ReadCloser, error) { return os.Open(s.blobPath(r.Blob)) }, r.Size)
	case Symlink:
		v.data, v.text = r.Link, true
	}
	return v, err
}

// gitMode is the mode git shows for a version.
func gitMode(v version) uint32 {
	switch v.typ {
	case Symlink:
		return 0o120000
	case Dir:
		return 0o040000 | uint32(v.mode.Perm())
	}
	return 0o100000 | uint32(v.mode.Perm())
}

// escapeLines escapes what a terminal might act on in each line of a diff,
// except tabs.
func escapeLines(d string) string {
	lines := strings.SplitAfter(d, "\n")
	for i, l := range lines {
		body, nl := strings.CutSuffix(l, "\n")
		parts := strings.Split(body, "\t")
		for j, p := range parts {
			parts[j] = printable.String(p)
		}
		lines[i] = strings.Join(parts, "\t")
		if nl {
			lines[i] += "\n"
		}
	}
	return strings.Join(lines, "")
}

// humanBytes writes n in decimal units: "1.2 MB".
func humanBytes(n int64) string {
	if n < 1000 {
		return fmt.Sprintf("%d B", n)
	}
	f, unit := float64(n), 0
	for f >= 1000 && unit < 6 {
		f /= 1000
		unit++
	}
	return fmt.Sprintf("%.1f %cB", f, " kMGTPE"[unit])
}
