package builder

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
)

// File type bits of a cpio mode (the same values as Linux's S_IF*).
const (
	modeDir  = 0o040000
	modeFile = 0o100000
	modeChar = 0o020000
	modeLink = 0o120000
)

// cpioEntry is one member of an initramfs. Name is relative, without a
// leading slash ("bin/busybox"). A regular file's content is Data, or the
// file at Source when Data is nil; a symbolic link's target is Data.
type cpioEntry struct {
	Name     string
	Mode     uint32 // type bits | permission bits
	UID, GID uint32
	Data     []byte
	Source   string
	// RMajor and RMinor are the device numbers of a character device.
	RMajor, RMinor uint32
}

func dirEntry(name string, perm uint32) cpioEntry {
	return cpioEntry{Name: name, Mode: modeDir | perm}
}

func fileEntry(name string, perm uint32, data []byte) cpioEntry {
	return cpioEntry{Name: name, Mode: modeFile | perm, Data: data}
}

func linkEntry(name, target string) cpioEntry {
	return cpioEntry{Name: name, Mode: modeLink | 0o777, Data: []byte(target)}
}

// writeCPIO writes entries as an uncompressed newc ("070701") archive, the
// format the Linux kernel unpacks into its initial rootfs. The output is a
// function of the entries alone: members are sorted by name, missing parent
// directories are added (0755, root), every mtime is 0, and inode numbers
// count up from 1. Duplicate names are an error.
func writeCPIO(w io.Writer, entries []cpioEntry) error {
	byName := make(map[string]cpioEntry, len(entries))
	for _, e := range entries {
		name := path.Clean(strings.TrimPrefix(e.Name, "/"))
		if name == "." || strings.HasPrefix(name, "../") || name == ".." {
			return fmt.Errorf("cpio: invalid member name %q", e.Name)
		}
		if _, dup := byName[name]; dup {
			return fmt.Errorf("cpio: duplicate member %q", name)
		}
		e.Name = name
		byName[name] = e
	}
	for name := range byName {
		for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
			if _, ok := byName[dir]; !ok {
				byName[dir] = dirEntry(dir, 0o755)
			}
		}
	}
	names := make([]string, 0, len(byName))
	for name, e := range byName {
		switch e.Mode & 0o170000 {
		case modeDir, modeFile, modeChar:
		case modeLink:
			if len(e.Data) == 0 {
				return fmt.Errorf("cpio: %s: symbolic link without a target", name)
			}
		default:
			return fmt.Errorf("cpio: %s: unsupported file type %o", name, e.Mode&0o170000)
		}
		names = append(names, name)
	}
	// Sorting by name puts every directory before its contents, because a
	// directory's name is a prefix of theirs.
	sort.Strings(names)

	bw := bufio.NewWriterSize(w, 1<<20)
	for i, name := range names {
		if err := writeMember(bw, uint32(i+1), byName[name]); err != nil {
			return err
		}
	}
	if err := writeHeader(bw, cpioEntry{Name: "TRAILER!!!"}, 0, 0, 1); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("cpio: write: %w", err)
	}
	return nil
}

func writeMember(w io.Writer, ino uint32, e cpioEntry) error {
	if t := e.Mode & 0o170000; t != modeFile && t != modeLink {
		nlink := uint32(1)
		if e.Mode&0o170000 == modeDir {
			nlink = 2
		}
		return writeHeader(w, e, ino, 0, nlink)
	}
	if e.Data != nil || e.Source == "" {
		if err := writeHeader(w, e, ino, int64(len(e.Data)), 1); err != nil {
			return err
		}
		if _, err := w.Write(e.Data); err != nil {
			return fmt.Errorf("cpio: write %s: %w", e.Name, err)
		}
		return pad(w, int64(len(e.Data)))
	}
	f, err := os.Open(e.Source)
	if err != nil {
		return fmt.Errorf("cpio: %s: %w", e.Name, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("cpio: %s: %w", e.Name, err)
	}
	if fi.Size() > 0xffffffff {
		return fmt.Errorf("cpio: %s: %d bytes is too large for newc", e.Name, fi.Size())
	}
	if err := writeHeader(w, e, ino, fi.Size(), 1); err != nil {
		return err
	}
	if _, err := io.CopyN(w, f, fi.Size()); err != nil {
		return fmt.Errorf("cpio: copy %s into %s: %w", e.Source, e.Name, err)
	}
	return pad(w, fi.Size())
}

// writeHeader writes a newc header and the NUL-terminated, padded name.
func writeHeader(w io.Writer, e cpioEntry, ino uint32, size int64, nlink uint32) error {
	namesize := len(e.Name) + 1
	hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		ino, e.Mode, e.UID, e.GID, nlink, 0 /* mtime */, size,
		0, 0, e.RMajor, e.RMinor, namesize, 0 /* check */)
	if _, err := io.WriteString(w, hdr+e.Name+"\x00"); err != nil {
		return fmt.Errorf("cpio: write %s: %w", e.Name, err)
	}
	return pad(w, int64(len(hdr)+namesize))
}

var zeros [4]byte

// pad writes the NULs that align the stream to 4 bytes after n bytes.
func pad(w io.Writer, n int64) error {
	if r := n % 4; r != 0 {
		if _, err := w.Write(zeros[:4-r]); err != nil {
			return fmt.Errorf("cpio: write: %w", err)
		}
	}
	return nil
}
