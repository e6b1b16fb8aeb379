package changes

import (
	"fmt"
	"io/fs"
	"os"
	"strings"
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
