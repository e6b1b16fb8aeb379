package changes

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode"

	"github.com/airlock-sandbox/airlock/internal/printable"
	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"
)

// nameProblem says why the slash-separated, workspace-relative name p
// cannot reach the host, or "" when it can: Ingest's own checks (badName,
// windowsName) and bounds, run again at apply on whatever the manifest
// holds. goos is the host's system.
func nameProblem(p, goos string) string {
	if why := badName(p); why != "" {
		return why
	}
	if len(p) > DefaultLimits.NameBytes {
		return fmt.Sprintf("a name longer than %d bytes", DefaultLimits.NameBytes)
	}
	for _, el := range strings.Split(p, "/") {
		if len(el) > maxComponent {
			return fmt.Sprintf("a name element longer than %d bytes", maxComponent)
		}
	}
	if goos == "windows" {
		return windowsName(p)
	}
	return ""
}

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

// hashHostFile returns the SHA-256 of the host file p beneath root, hex;
// a symlink is not followed.
func hashHostFile(root *os.Root, p string) (string, error) {
	fi, err := root.Lstat(p)
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s is no longer a file", p)
	}
	return hashFile(root, p, fi)
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

// refuseFolded refuses the layer's entries whose names differ only in
// case or Unicode normalisation: on a host that takes them as one name,
// applying both would write one path twice.
func refuseFolded(l *layer) {
	byKey := map[string][]string{}
	for p := range l.entries {
		k := foldKey(p)
		byKey[k] = append(byKey[k], p)
	}
	for _, ps := range byKey {
		if len(ps) > 1 {
			slices.Sort(ps)
			for _, p := range ps {
				l.refuse(p, "differs from "+printable.String(strings.Join(slices.DeleteFunc(slices.Clone(ps), func(q string) bool { return q == p }), ", "))+
					" only in case or Unicode normalisation, which the host's file system takes as one name")
			}
		}
	}
}

var folder = cases.Fold()

func foldKey(p string) string { return norm.NFC.String(folder.String(norm.NFD.String(p))) }

// foldsNames reports whether the host's file system at root takes names
// that differ only in case as one: it looks the first of the workspace's
// entries (or else the workspace folder itself) that has a letter up by
// its name in the other case, and asks whether that is the same file.
// Such a file system (APFS, HFS+, NTFS by default) also counts as
// normalising, which APFS and HFS+ are.
func foldsNames(root *os.Root, workspace string) bool {
	if f, err := root.Open("."); err == nil {
		names, _ := f.Readdirnames(256)
		f.Close()
		for _, n := range names {
			if flip := flipCase(n); flip != n {
				a, errA := root.Lstat(n)
				b, errB := root.Lstat(flip)
				return errA == nil && errB == nil && os.SameFile(a, b)
			}
		}
	}
	dir, name := filepath.Split(filepath.Clean(workspace))
	if flip := flipCase(name); flip != name {
		a, errA := os.Lstat(filepath.Join(dir, name))
		b, errB := os.Lstat(filepath.Join(dir, flip))
		return errA == nil && errB == nil && os.SameFile(a, b)
	}
	return false
}

func flipCase(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsUpper(r) {
			return unicode.ToLower(r)
		}
		return unicode.ToUpper(r)
	}, s)
}
