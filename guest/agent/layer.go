//go:build linux

package agent

import (
	"archive/tar"
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	agentv1 "github.com/airlock-sandbox/airlock/guest/api/agent/v1"
	"github.com/airlock-sandbox/airlock/guest/api/execwire"
)

// The changes layer's calls (api.PortLayer): the host reads the overlay's
// upper folder as a tar in the OCI layer format, and makes the guest forget
// paths of it once it applied or discarded them.

// OCI whiteouts (image-spec layer.md): an empty file named whiteoutPrefix
// + NAME deletes NAME; one named opaqueWhiteout in a folder hides every
// entry of the lower layers in it.
const (
	whiteoutPrefix = ".wh."
	opaqueWhiteout = ".wh..wh..opq"
	// overlayOpaque is the xattr overlayfs marks an opaque upper folder
	// with ("y"), made by a folder deleted and made again.
	overlayOpaque = "trusted.overlay.opaque"
)

// layerChunk is the tar bytes sent in one frame: large enough that a
// frame's header and the transport's per-write cost vanish, well below
// execwire.MaxPayload.
const layerChunk = 256 << 10

// layerRequestTimeout bounds the wait for the host's request on a layer
// stream; layerWriteTimeout a write the host does not take (a host that
// went away).
const (
	layerRequestTimeout = 10 * time.Second
	layerWriteTimeout   = 2 * time.Minute
)

// ServeLayer answers the layer calls whose streams arrive on l
// (api.PortLayer), one stream per call, until l is closed. Without a
// changes layer (Config.LayerUpper empty) every call fails with
// FailedPrecondition.
func (s *Server) ServeLayer(l net.Listener) error {
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		go func() {
			defer func() {
				if r := recover(); r != nil {
					s.log.Error("layer call panicked", "panic", r)
					c.Close()
				}
			}()
			s.serveLayer(c)
		}()
	}
}

func (s *Server) serveLayer(c net.Conn) {
	defer c.Close()
	r := execwire.NewReader(c)
	_ = c.SetReadDeadline(time.Now().Add(layerRequestTimeout))
	req := new(agentv1.LayerRequest)
	k, n, err := r.Next()
	if err == nil && k != execwire.KindRequest {
		err = fmt.Errorf("%w: a %s frame from the host", execwire.ErrFrame, k)
	}
	if err == nil {
		err = r.Message(n, req)
	}
	if err != nil {
		s.log.Warn("layer call", "err", err)
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	// The host ending the stream abandons the call.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		var b [1]byte
		_, _ = c.Read(b[:])
		cancel()
	}()
	fw := &frameWriter{c: c, buf: make([]byte, execwire.HeaderSize, execwire.HeaderSize+layerChunk)}
	var done *agentv1.LayerDone
	switch {
	case s.cfg.LayerUpper == "":
		err = agentv1.Errorf(agentv1.Code_FAILED_PRECONDITION, "this guest holds no changes layer (booted without changes held)")
	case req.GetExport() != nil:
		var entries uint64
		entries, err = ExportLayer(ctx, s.cfg.LayerUpper, s.cfg.LayerLower, fw)
		if err == nil {
			err = fw.Flush()
		}
		done = &agentv1.LayerDone{Entries: entries, Bytes: fw.sent}
	case req.GetForget() != nil:
		var removed uint64
		removed, err = ForgetLayer(s.cfg.LayerUpper, s.cfg.LayerLower, req.GetForget().GetPaths())
		if err == nil && s.cfg.RefreshLayer != nil {
			// Set first: a task that ends during the refresh drops
			// the entries it held again.
			s.layerStale.Store(true)
			err = s.cfg.RefreshLayer()
			if s.tasks.Load() == 0 {
				s.layerStale.Store(false)
			}
		}
		done = &agentv1.LayerDone{Entries: removed}
	default:
		err = agentv1.Errorf(agentv1.Code_UNIMPLEMENTED, "unknown layer call")
	}
	resp := &agentv1.LayerResponse{Result: &agentv1.LayerResponse_Done{Done: done}}
	if err != nil {
		s.log.Warn("layer call failed", "err", err)
		resp.Result = &agentv1.LayerResponse_Error{Error: agentv1.FromError(err)}
	}
	b, err := execwire.AppendMessage(nil, execwire.KindEvent, resp)
	if err != nil {
		return
	}
	_ = c.SetWriteDeadline(time.Now().Add(layerWriteTimeout))
	_, _ = c.Write(b)
}

// frameWriter sends what is written to it in execwire.KindStdout frames of
// up to layerChunk bytes.
type frameWriter struct {
	c    net.Conn
	buf  []byte // a header's room, then the bytes not yet sent
	sent uint64 // payload bytes sent
}

func (w *frameWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		m := min(len(p), cap(w.buf)-len(w.buf))
		w.buf = append(w.buf, p[:m]...)
		p, n = p[m:], n+m
		if len(w.buf) == cap(w.buf) {
			if err := w.Flush(); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// Flush sends the bytes held.
func (w *frameWriter) Flush() error {
	size := len(w.buf) - execwire.HeaderSize
	if size == 0 {
		return nil
	}
	execwire.PutHeader(w.buf, execwire.KindStdout, size)
	_ = w.c.SetWriteDeadline(time.Now().Add(layerWriteTimeout))
	if _, err := w.c.Write(w.buf); err != nil {
		return fmt.Errorf("layer: send: %w", err)
	}
	w.sent += uint64(size)
	w.buf = w.buf[:execwire.HeaderSize]
	return nil
}

// ExportLayer writes the overlay upper folder upper to w as a tar in the
// OCI layer format (PAX headers, names relative to the folder, folders
// before what they hold, each folder's entries in name order), and returns
// how many entries it wrote:
//   - a whiteout (a character device 0/0, how overlayfs marks a deleted
//     path) becomes an empty regular file ".wh.NAME";
//   - an opaque folder (trusted.overlay.opaque=y: deleted and made again)
//     is followed by an empty ".wh..wh..opq" in it, when the lower folder
//     lower has a folder there to hide (overlayfs also marks every folder
//     made new in a merged one opaque, which hides nothing; "" marks all);
//   - folders, regular files, symlinks and fifos are themselves, with
//     mode, owner and modification time; sockets and other devices (which
//     tasks cannot make) are left out.
//
// A file being written while it is read goes out as far as it was read
// (padded with zeros, or cut, to the size its header gave): the next
// export, once the writer is done, has it whole.
func ExportLayer(ctx context.Context, upper, lower string, w io.Writer) (uint64, error) {
	bw := bufio.NewWriterSize(w, 64<<10)
	tw := tar.NewWriter(bw)
	var entries uint64
	var walk func(dir, rel string) error
	walk = func(dir, rel string) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		ents, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		// os.ReadDir sorts by name.
		for _, e := range ents {
			p, name := filepath.Join(dir, e.Name()), path.Join(rel, e.Name())
			var st unix.Stat_t
			if err := unix.Lstat(p, &st); err != nil {
				if errors.Is(err, unix.ENOENT) {
					continue // removed since the folder was read
				}
				return &fs.PathError{Op: "lstat", Path: p, Err: err}
			}
			hdr := &tar.Header{
				Name: name, Mode: int64(st.Mode & 0o7777), Uid: int(st.Uid), Gid: int(st.Gid),
				ModTime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec), Format: tar.FormatPAX,
			}
			switch st.Mode & unix.S_IFMT {
			case unix.S_IFCHR:
				if st.Rdev != 0 {
					continue
				}
				hdr = &tar.Header{Name: path.Join(rel, whiteoutPrefix+e.Name()), Typeflag: tar.TypeReg, Mode: 0o644,
					ModTime: hdr.ModTime, Format: tar.FormatPAX}
				if err := tw.WriteHeader(hdr); err != nil {
					return err
				}
				entries++
			case unix.S_IFDIR:
				hdr.Typeflag, hdr.Name = tar.TypeDir, name+"/"
				if err := tw.WriteHeader(hdr); err != nil {
					return err
				}
				entries++
				if opaque(p) && hides(lower, name) {
					wh := &tar.Header{Name: path.Join(name, opaqueWhiteout), Typeflag: tar.TypeReg, Mode: 0o644,
						ModTime: hdr.ModTime, Format: tar.FormatPAX}
					if err := tw.WriteHeader(wh); err != nil {
						return err
					}
					entries++
				}
				if err := walk(p, name); err != nil {
					return err
				}
			case unix.S_IFLNK:
				target, err := os.Readlink(p)
				if err != nil {
					return err
				}
				hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
				if err := tw.WriteHeader(hdr); err != nil {
					return err
				}
				entries++
			case unix.S_IFIFO:
				hdr.Typeflag = tar.TypeFifo
				if err := tw.WriteHeader(hdr); err != nil {
					return err
				}
				entries++
			case unix.S_IFREG:
				if err := exportFile(tw, hdr, p, st.Size); err != nil {
					return err
				}
				entries++
			}
		}
		return nil
	}
	if err := walk(upper, ""); err != nil {
		return entries, fmt.Errorf("layer: export: %w", err)
	}
	if err := tw.Close(); err != nil {
		return entries, fmt.Errorf("layer: export: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return entries, fmt.Errorf("layer: export: %w", err)
	}
	return entries, nil
}

// exportFile writes one regular file: its header with the size it had
// when looked at, then exactly that many bytes.
func exportFile(tw *tar.Writer, hdr *tar.Header, p string, size int64) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	hdr.Typeflag, hdr.Size = tar.TypeReg, size
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	n, err := io.Copy(tw, io.LimitReader(f, size))
	if err != nil {
		return err
	}
	if n < size {
		_, err = io.CopyN(tw, zeros{}, size-n)
	}
	return err
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// hides reports whether an opaque folder at rel (slash-separated) hides
// anything: whether the lower folder lower has a folder there.
func hides(lower, rel string) bool {
	if lower == "" {
		return true
	}
	fi, err := os.Lstat(filepath.Join(lower, filepath.FromSlash(rel)))
	return err == nil && fi.IsDir()
}

// opaque reports whether the upper folder p is marked opaque.
func opaque(p string) bool {
	var v [2]byte
	n, err := unix.Lgetxattr(p, overlayOpaque, v[:])
	return err == nil && n == 1 && v[0] == 'y'
}

// ForgetLayer removes paths (slash-separated, relative to the overlay's
// root; all when none) from the upper folder upper: a file, a whiteout,
// a folder with everything in it and its opaque mark. A path the layer
// does not hold is no error. Then the folders that held them and differ
// from the lower folder lower in nothing any more (empty, not opaque, a
// folder there with the same mode) are removed too, so the export no
// longer lists them. It returns how many entries it removed; the caller
// makes the overlay see the change (RefreshLayer).
func ForgetLayer(upper, lower string, paths []string) (uint64, error) {
	if len(paths) == 0 {
		ents, err := os.ReadDir(upper)
		if err != nil {
			return 0, fmt.Errorf("layer: forget: %w", err)
		}
		for _, e := range ents {
			paths = append(paths, e.Name())
		}
	}
	for _, p := range paths {
		if !validLayerPath(p) {
			return 0, agentv1.Errorf(agentv1.Code_INVALID_ARGUMENT, "layer: forget: %q is not a clean relative path", p)
		}
	}
	root, err := os.OpenRoot(upper)
	if err != nil {
		return 0, fmt.Errorf("layer: forget: %w", err)
	}
	defer root.Close()
	var removed uint64
	parents := map[string]bool{}
	for _, p := range paths {
		n, err := removeAll(root, p)
		removed += n
		if err != nil {
			return removed, fmt.Errorf("layer: forget %s: %w", p, err)
		}
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			parents[d] = true
		}
	}
	// Deepest first, so a parent emptied by its child's removal goes too.
	dirs := make([]string, 0, len(parents))
	for d := range parents {
		dirs = append(dirs, d)
	}
	slices.SortFunc(dirs, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	for _, d := range dirs {
		if unchangedDir(filepath.Join(upper, filepath.FromSlash(d)), filepath.Join(lower, filepath.FromSlash(d))) {
			if err := root.Remove(d); err == nil {
				removed++
			}
		}
	}
	return removed, nil
}

// removeAll removes p and everything under it within root, counting the
// entries removed; a missing p removes nothing.
func removeAll(root *os.Root, p string) (uint64, error) {
	fi, err := root.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var n uint64
	if fi.IsDir() {
		f, err := root.Open(p)
		if err != nil {
			return 0, err
		}
		names, err := f.Readdirnames(-1)
		f.Close()
		if err != nil {
			return 0, err
		}
		for _, name := range names {
			m, err := removeAll(root, p+"/"+name)
			n += m
			if err != nil {
				return n, err
			}
		}
	}
	if err := root.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return n, err
	}
	return n + 1, nil
}

// unchangedDir reports whether the upper folder up says nothing the lower
// folder low does not: empty, not opaque, and low a folder of the same
// mode.
func unchangedDir(up, low string) bool {
	ents, err := os.ReadDir(up)
	if err != nil || len(ents) > 0 || opaque(up) {
		return false
	}
	var su, sl unix.Stat_t
	if unix.Lstat(up, &su) != nil || unix.Stat(low, &sl) != nil {
		return false
	}
	return sl.Mode&unix.S_IFMT == unix.S_IFDIR && su.Mode&0o7777 == sl.Mode&0o7777
}

// validLayerPath reports whether p names a path inside the layer: relative,
// clean, slash-separated, not the root itself.
func validLayerPath(p string) bool {
	return p != "" && p != "." && !path.IsAbs(p) && path.Clean(p) == p && p != ".." &&
		!strings.HasPrefix(p, "../") && !strings.ContainsRune(p, 0)
}

// dropDentries makes the overlay at /workspace look up again what a forget
// removed beneath it: overlayfs keeps the dentries and inodes it resolved
// (a file's upper copy, a whiteout's negative entry, a folder's opaque
// flag) and does not see its upper folder change under it. Dropping the
// kernel's reclaimable dentries and inodes (drop_caches 2) evicts every one
// no process holds, and the next lookup finds the lower layer's version.
// One a task holds (an open file, its working folder) stays, for every
// process, as the forget left it: a file's old bytes, a folder emptied
// (its upper folder is gone), until the holder lets go and the entries
// are dropped again: taskDone does that once the last task has ended.
// Remounting the overlay instead is no better: it fails while anything
// holds it (EBUSY).
func dropDentries() error {
	unix.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("2"), 0); err != nil {
		return fmt.Errorf("layer: drop the overlay's cached entries: %w", err)
	}
	return nil
}

// taskDone counts a task's end; the last one to end after a forget that
// ran beside tasks drops the overlay's entries they held (dropDentries).
func (s *Server) taskDone() {
	if s.tasks.Add(-1) == 0 && s.layerStale.CompareAndSwap(true, false) && s.cfg.RefreshLayer != nil {
		if err := s.cfg.RefreshLayer(); err != nil {
			s.log.Warn("layer: refresh after the last task", "err", err)
		}
	}
}
