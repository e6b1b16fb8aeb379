package changes

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/printable"
)

// ErrLayer means the guest's layer broke the tar format or a bound: the
// pending changes are as they were.
var ErrLayer = errors.New("the guest's layer is unreadable or too large")

// OCI layer whiteouts.
const (
	whiteoutPrefix = ".wh."
	opaqueMarker   = ".wh..wh..opq"
)

// maxComponent bounds one element of a path: what file systems allow.
const maxComponent = 255

// layerEntry is one path the guest's layer holds.
type layerEntry struct {
	typ   Type // "" for a whiteout
	mode  fs.FileMode
	mtime time.Time
	size  int64
	blob  string // files: the SHA-256 of the content in blobs/
	link  string // symlinks
}

// layer is what Ingest read from the stream.
type layer struct {
	entries map[string]*layerEntry // by clean slash path
	opaque  map[string]bool        // folders that hide the host's ("" is the root)
	refused map[string]string      // path -> reason
	dup     map[string]bool
}

func (l *layer) refuse(p, reason string) {
	if _, ok := l.refused[p]; !ok {
		l.refused[p] = reason
	}
}

// readLayer reads the tar stream r, writing the content of its files to
// blobs/. It returns an error wrapping ErrLayer when the stream breaks the
// format or lim; names, types and links it will not carry to the host are
// refused, not errors.
func (s *Store) readLayer(ctx context.Context, r io.Reader, lim Limits) (*layer, error) {
	l := &layer{
		entries: map[string]*layerEntry{},
		opaque:  map[string]bool{},
		refused: map[string]string{},
		dup:     map[string]bool{},
	}
	tr := tar.NewReader(ctxReader{ctx, r})
	var total int64
	for n := 1; ; n++ {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, layerErr(ctx, "%v", err)
		}
		if n > lim.Entries {
			return nil, layerErr(ctx, "more than %d entries", lim.Entries)
		}
		if err := checkBounds(hdr.Name, lim); err != nil {
			return nil, err
		}
		if hdr.Typeflag == tar.TypeSymlink || hdr.Typeflag == tar.TypeLink {
			if err := checkBounds(hdr.Linkname, lim); err != nil {
				return nil, err
			}
		}
		if total += hdr.Size; hdr.Size < 0 || total > lim.Bytes {
			return nil, layerErr(ctx, "more than %d bytes of content", lim.Bytes)
		}
		if err := s.readEntry(l, tr, hdr); err != nil {
			if pe := (*fs.PathError)(nil); errors.As(err, &pe) {
				return nil, fmt.Errorf("changes: storing the guest's layer: %w", err)
			}
			return nil, layerErr(ctx, "%s: %v", printable.String(hdr.Name), err)
		}
	}
	for p := range l.dup {
		delete(l.entries, p)
		l.refuse(p, "the layer holds it twice")
	}
	return l, nil
}

// readEntry adds one tar entry to l.
func (s *Store) readEntry(l *layer, tr *tar.Reader, hdr *tar.Header) error {
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		return nil // names no path
	}
	name := strings.TrimSuffix(strings.TrimPrefix(hdr.Name, "./"), "/")
	if why := badName(name); why != "" {
		if name != "." && name != "" { // the root's own entry carries nothing
			l.refuse(name, why)
		}
		return nil
	}
	dir, base := path.Split(name)
	dir = strings.TrimSuffix(dir, "/")
	if base == opaqueMarker {
		l.opaque[dir] = true
		return nil
	}
	e := &layerEntry{mode: fs.FileMode(hdr.Mode).Perm(), mtime: hdr.ModTime, size: hdr.Size}
	if target, ok := strings.CutPrefix(base, whiteoutPrefix); ok {
		name = path.Join(dir, target)
		if why := badName(name); why != "" || strings.HasPrefix(target, whiteoutPrefix) {
			l.refuse(name, "not a valid whiteout")
			return nil
		}
		e = &layerEntry{}
	} else {
		switch hdr.Typeflag {
		case tar.TypeDir:
			e.typ, e.size = Dir, 0
		case tar.TypeReg:
			e.typ = File
			hash, err := s.writeBlob(tr, hdr.Size)
			if err != nil {
				return err
			}
			e.blob = hash
		case tar.TypeSymlink:
			if why := badLink(name, hdr.Linkname); why != "" {
				l.refuse(name, why)
				return nil
			}
			e.typ, e.link, e.size = Symlink, hdr.Linkname, 0
		case tar.TypeLink:
			t := l.entries[strings.TrimPrefix(hdr.Linkname, "./")]
			if t == nil || t.typ != File {
				l.refuse(name, "a hard link to "+printable.String(hdr.Linkname)+", which is no file before it in the layer")
				return nil
			}
			// A copy: the host gets a file of its own.
			c := *t
			c.mtime = hdr.ModTime
			e = &c
		default:
			l.refuse(name, fmt.Sprintf("a %s, which is never created on the host", typeName(hdr.Typeflag)))
			return nil
		}
	}
	if l.entries[name] != nil {
		l.dup[name] = true
	}
	l.entries[name] = e
	return nil
}

// checkBounds returns an ErrLayer error when name is longer than Limits
// or a file system allows.
func checkBounds(name string, lim Limits) error {
	if len(name) > lim.NameBytes {
		return fmt.Errorf("changes: %w: a name of more than %d bytes", ErrLayer, lim.NameBytes)
	}
	for elem := range strings.SplitSeq(name, "/") {
		if len(elem) > maxComponent {
			return fmt.Errorf("changes: %w: a name with an element of more than %d bytes", ErrLayer, maxComponent)
		}
	}
	return nil
}

// badName says why the slash path name cannot reach the host: "" when it
// can. Names must be clean, relative, without "..", and print as they are
// (no NUL, controls or invalid UTF-8); a backslash would be a separator on
// Windows.
func badName(name string) string {
	switch {
	case name == "" || name == ".":
		return "an empty name"
	case printable.String(name) != name:
		return "a name with control characters or invalid UTF-8"
	case strings.HasPrefix(name, "/"):
		return "an absolute name"
	case name == ".." || strings.HasPrefix(name, "../") || strings.Contains(name, "/../") || strings.HasSuffix(name, "/.."):
		return `a name with ".."`
	case path.Clean(name) != name:
		return "a name that is not clean"
	case strings.ContainsAny(name, `\`):
		return "a name with a backslash"
	}
	return ""
}

// badLink says why a symlink at name to target cannot reach the host: ""
// when it can. The target, read from the link's own folder, must stay in
// the workspace.
func badLink(name, target string) string {
	switch {
	case target == "":
		return "a symlink to nothing"
	case printable.String(target) != target || strings.Contains(target, `\`):
		return "a symlink whose target has control characters, invalid UTF-8 or a backslash"
	case path.IsAbs(target) || len(target) > 1 && target[1] == ':': // C:
		return "a symlink to an absolute path"
	}
	if t := path.Join(path.Dir(name), target); t == ".." || strings.HasPrefix(t, "../") {
		return "a symlink that points outside the workspace"
	}
	// "a/.." is not the folder a is in when a is itself a symlink: ".."
	// may only lead.
	named := false
	for elem := range strings.SplitSeq(target, "/") {
		if elem == ".." && named {
			return `a symlink with ".." after a name`
		}
		named = named || elem != ".." && elem != "." && elem != ""
	}
	return ""
}

// windowsName says why name cannot be a path on Windows: "" when it can.
// There a name's trailing dots and spaces are dropped (two names, one
// file), ':' opens an alternate data stream, and CON, NUL, COM1 ... name
// devices in every folder, with any extension.
func windowsName(name string) string {
	for elem := range strings.SplitSeq(name, "/") {
		stem, _, _ := strings.Cut(elem, ".")
		switch {
		case strings.ContainsAny(elem, `<>:"|?*`):
			return `a name Windows cannot hold (one of <>:"|?*)`
		case strings.HasSuffix(elem, ".") || strings.HasSuffix(elem, " "):
			return "a name Windows cannot hold (a trailing dot or space)"
		case windowsDevice(strings.ToUpper(strings.TrimRight(stem, " "))):
			return "a name Windows keeps for a device"
		}
	}
	return ""
}

func windowsDevice(stem string) bool {
	switch stem {
	case "CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$":
		return true
	}
	return len(stem) == 4 && (strings.HasPrefix(stem, "COM") || strings.HasPrefix(stem, "LPT")) && stem[3] >= '0' && stem[3] <= '9'
}

func typeName(t byte) string {
	switch t {
	case tar.TypeChar:
		return "character device"
	case tar.TypeBlock:
		return "block device"
	case tar.TypeFifo:
		return "fifo"
	}
	return fmt.Sprintf("tar entry of type %q", t)
}

// writeBlob stores size bytes from r in blobs/ under their SHA-256: by way
// of a synced temporary file and a rename, so a blob is whole or absent.
func (s *Store) writeBlob(r io.Reader, size int64) (string, error) {
	f, err := os.CreateTemp(s.blobPath(""), ".ingest-*")
	if err != nil {
		return "", err
	}
	tmp := f.Name()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), r)
	if err == nil && n != size {
		err = io.ErrUnexpectedEOF
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	hash := hex.EncodeToString(h.Sum(nil))
	if err == nil {
		err = os.Rename(tmp, s.blobPath(hash))
	}
	if err != nil {
		os.Remove(tmp)
		return "", err
	}
	return hash, nil
}

// layerErr wraps a stream failure in ErrLayer, or in the context's error
// when that is the cause.
func layerErr(ctx context.Context, format string, args ...any) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("changes: reading the guest's layer: %w", err)
	}
	return fmt.Errorf("changes: %w: %s", ErrLayer, fmt.Sprintf(format, args...))
}

// ctxReader stops reading once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
