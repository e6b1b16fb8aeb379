package manifest

import (
	"fmt"
	"io/fs"
	"syscall"
	"time"
)

// fileIdentity describes fi so that any change to the file changes it
// (see DigestCache), and says when the file last changed.
func fileIdentity(fi fs.FileInfo) (id string, changed time.Time) {
	changed = fi.ModTime()
	id = fmt.Sprintf("%d %d", fi.Size(), fi.ModTime().UnixNano())
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		ctime := time.Unix(st.Ctimespec.Sec, st.Ctimespec.Nsec)
		id += fmt.Sprintf(" %d %d %d", ctime.UnixNano(), st.Ino, st.Dev)
		if ctime.After(changed) {
			changed = ctime
		}
	}
	return id, changed
}
