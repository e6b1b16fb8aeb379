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
	"strings"

	"golang.org/x/text/unicode/norm"
)

// Bounds on a name, whatever Ingest accepted: the longest path the
// kernels Airlock runs on take, and the longest file name.
const (
	maxPathBytes = 4096
	maxNameBytes = 255
)

// nameProblem says why the slash-separated, workspace-relative name p
// cannot reach the host, or "" when it can. goos is the host's system.
func nameProblem(p, goos string) string {
	switch {
	case p == "" || p == ".":
		return "empty name"
	case len(p) > maxPathBytes:
		return fmt.Sprintf("name longer than %d bytes", maxPathBytes)
	case strings.HasPrefix(p, "/") || (len(p) > 1 && p[1] == ':'):
		return "absolute name"
	case strings.ContainsAny(p, "\x00\\"):
		return "name holds a NUL or a backslash"
	case goos == "windows" && strings.ContainsAny(p, `:*?"<>|`):
		return "name holds a character Windows forbids"
	}
	for _, el := range strings.Split(p, "/") {
		switch {
		case el == "..":
			return `name climbs out with ".."`
		case el == "" || el == ".":
			return "name is not clean"
		case len(el) > maxNameBytes:
			return fmt.Sprintf("a name element is longer than %d bytes", maxNameBytes)
		case goos == "windows" && windowsAlias(el):
			return "a name Windows treats as another (a device name, or a trailing dot or space)"
		}
	}
	if path.Clean(p) != p {
		return "name is not clean"
	}
	return ""
}

// linkProblem says why a symlink at p pointing to target would lead out
// of the workspace, or "".
func linkProblem(p, target string) string {
	if target == "" {
		return "empty symlink target"
	}
	if strings.HasPrefix(target, "/") || strings.ContainsAny(target, "\x00\\") || (len(target) > 1 && target[1] == ':') {
		return "symlink points outside the folder"
	}
	if len(target) > maxPathBytes {
		return "symlink target too long"
	}
	j := path.Join(path.Dir(p), target)
	if j == ".." || strings.HasPrefix(j, "../") {
		return "symlink points outside the folder"
	}
	return ""
}

// foldsCase says whether goos's usual file systems treat names that
// differ only in case or Unicode normalisation as one.
func foldsCase(goos string) bool { return goos == "darwin" || goos == "windows" }

// foldName is the key under which a case-insensitive, normalising file
// system finds p.
func foldName(p string) string { return strings.ToLower(norm.NFC.String(p)) }

// typeOf maps a host file's mode to a Type; ok is false for what Airlock
// never creates or keeps (devices, fifos, sockets).
func typeOf(m fs.FileMode) (t Type, ok bool) {
	switch {
	case m.IsRegular():
		return File, true
	case m.IsDir():
		return Dir, true
	case m&fs.ModeSymlink != 0:
		return Symlink, true
	}
	return "", false
}

// hashFile returns the SHA-256 of a file beneath root, hex.
func hashFile(root *os.Root, p string) (string, error) {
	f, err := root.OpenFile(p, os.O_RDONLY|noFollow, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// isHash says whether s names a blob: 64 lower-case hex digits.
func isHash(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// ancestors returns p's parent folders, outermost first ("a", "a/b" for
// "a/b/c").
func ancestors(p string) []string {
	var out []string
	for i := 0; i < len(p); i++ {
		if p[i] == '/' {
			out = append(out, p[:i])
		}
	}
	return out
}

// under says whether p is q or beneath it.
func under(p, q string) bool { return p == q || strings.HasPrefix(p, q+"/") }

// notExist says whether err means the path is absent (or a parent is not
// a folder, which for Lstat means the same).
func notExist(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || isNotDir(err)
}

// windowsAlias says whether Windows maps the name element el to another
// name (a trailing dot or space is dropped) or to a device (CON, NUL,
// COM1, ... with any extension).
func windowsAlias(el string) bool {
	if strings.HasSuffix(el, ".") || strings.HasSuffix(el, " ") {
		return true
	}
	stem, _, _ := strings.Cut(el, ".")
	switch strings.ToUpper(strings.TrimRight(stem, " ")) {
	case "CON", "PRN", "AUX", "NUL", "CONIN$", "CONOUT$",
		"COM1", "COM2", "COM3", "COM4", "COM5", "COM6", "COM7", "COM8", "COM9",
		"LPT1", "LPT2", "LPT3", "LPT4", "LPT5", "LPT6", "LPT7", "LPT8", "LPT9":
		return true
	}
	return false
}
