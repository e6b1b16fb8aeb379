package boot

import (
	"strconv"
	"strings"
)

// setUserIDs rewrites the task user's entry in an /etc/passwd (fields=7,
// uid and gid at 2 and 3) or /etc/group (fields=4, gid at 2) file so that
// the name matches the uid and gid the host chose. Lines it does not
// understand are kept as they are.
func setUserIDs(file, name string, uid, gid uint32, group bool) string {
	lines := strings.SplitAfter(file, "\n")
	for i, l := range lines {
		body, nl := strings.CutSuffix(l, "\n")
		f := strings.Split(body, ":")
		if f[0] != name {
			continue
		}
		switch {
		case group && len(f) == 4:
			f[2] = strconv.FormatUint(uint64(gid), 10)
		case !group && len(f) == 7:
			f[2] = strconv.FormatUint(uint64(uid), 10)
			f[3] = strconv.FormatUint(uint64(gid), 10)
		default:
			continue
		}
		lines[i] = strings.Join(f, ":")
		if nl {
			lines[i] += "\n"
		}
	}
	return strings.Join(lines, "")
}
