package boot

import (
	"bufio"
	"fmt"
	"io"
	"path"
	"strings"
)

// ModulesList is the image's module load list: one absolute .ko path a
// line, dependencies first.
const ModulesList = "/lib/modules/airlock.load"

const maxModules = 1024

// ParseModules reads a module load list. Blank lines and lines starting
// with '#' are skipped; every other line must be an absolute, clean path.
// Bad lines are returned as problems, not errors: one bad entry must not
// keep the others from loading.
func ParseModules(r io.Reader) (paths, problems []string, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), 4096)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if !path.IsAbs(line) || path.Clean(line) != line || strings.ContainsAny(line, " \t\x00") {
			problems = append(problems, fmt.Sprintf("line %d: %q is not an absolute module path", n, line))
			continue
		}
		if len(paths) == maxModules {
			return paths, problems, fmt.Errorf("module list longer than %d entries", maxModules)
		}
		paths = append(paths, line)
	}
	if err := sc.Err(); err != nil {
		return paths, problems, fmt.Errorf("module list: %w", err)
	}
	return paths, problems, nil
}

// compressed reports whether a module file needs the kernel to decompress
// it (finit_module MODULE_INIT_COMPRESSED_FILE, Linux 6.4+).
func compressed(p string) bool {
	for _, ext := range []string{".ko.xz", ".ko.zst", ".ko.gz"} {
		if strings.HasSuffix(p, ext) {
			return true
		}
	}
	return false
}
