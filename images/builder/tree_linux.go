package builder

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// writeTree writes the tree at root (root itself excluded: tar2ext4 makes
// the root directory 0755 root:root) to w as a tar stream in lexical
// order, so equal trees give equal streams. It keeps what the root file
// system needs: owners, modes with setuid/setgid/sticky, symbolic and
// hard links, device nodes, FIFOs and extended attributes (file
// capabilities are the security.capability attribute), each file's
// modification time as its access and change times too (a tree's
// ctime cannot be set, and would make rebuilds differ). Sockets are left
// out: nothing listens on them in an image.
func writeTree(w io.Writer, root string) error {
	tw := tar.NewWriter(w)
	links := map[[2]uint64]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		mtime := time.Unix(st.Mtim.Unix())
		hdr := &tar.Header{
			Name: name, Mode: int64(st.Mode & 0o7777), Uid: int(st.Uid), Gid: int(st.Gid),
			ModTime: mtime, AccessTime: mtime, ChangeTime: mtime, Format: tar.FormatPAX,
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			hdr.Typeflag = tar.TypeDir
		case unix.S_IFREG:
			hdr.Typeflag, hdr.Size = tar.TypeReg, st.Size
			if st.Nlink > 1 {
				id := [2]uint64{uint64(st.Dev), st.Ino}
				if first, ok := links[id]; ok {
					hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
				} else {
					links[id] = name
				}
			}
		case unix.S_IFLNK:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
		case unix.S_IFCHR, unix.S_IFBLK:
			hdr.Typeflag = tar.TypeChar
			if st.Mode&unix.S_IFMT == unix.S_IFBLK {
				hdr.Typeflag = tar.TypeBlock
			}
			hdr.Devmajor, hdr.Devminor = int64(unix.Major(uint64(st.Rdev))), int64(unix.Minor(uint64(st.Rdev)))
		case unix.S_IFIFO:
			hdr.Typeflag = tar.TypeFifo
		default:
			return nil // a socket
		}
		if hdr.Typeflag != tar.TypeLink {
			x, err := xattrs(p)
			if err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			if len(x) > 0 {
				hdr.PAXRecords = x
			}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if hdr.Typeflag == tar.TypeReg {
			in, err := os.Open(p)
			if err != nil {
				return err
			}
			n, err := io.Copy(tw, in)
			in.Close()
			if err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			if n != hdr.Size {
				return fmt.Errorf("%s changed while it was read", p)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// xattrs returns p's extended attributes (p itself, not a link's target)
// as the PAX records tar2ext4 reads ("SCHILY.xattr.<name>").
func xattrs(p string) (map[string]string, error) {
	buf := make([]byte, 4096)
	n, err := unix.Llistxattr(p, buf)
	if errors.Is(err, unix.ERANGE) {
		if n, err = unix.Llistxattr(p, nil); err == nil {
			buf = make([]byte, n)
			n, err = unix.Llistxattr(p, buf)
		}
	}
	if errors.Is(err, unix.ENOTSUP) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list extended attributes: %w", err)
	}
	var recs map[string]string
	for _, name := range strings.Split(string(buf[:n]), "\x00") {
		if name == "" {
			continue
		}
		sz, err := unix.Lgetxattr(p, name, nil)
		if err != nil {
			return nil, fmt.Errorf("extended attribute %s: %w", name, err)
		}
		v := make([]byte, sz)
		if sz, err = unix.Lgetxattr(p, name, v); err != nil {
			return nil, fmt.Errorf("extended attribute %s: %w", name, err)
		}
		if recs == nil {
			recs = map[string]string{}
		}
		recs["SCHILY.xattr."+name] = string(v[:sz])
	}
	return recs, nil
}
