package changes

import (
	"io/fs"
	"syscall"
	"time"
)

// changeTime is fi's ctime: when its content or metadata last changed.
func changeTime(fi fs.FileInfo) time.Time {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return time.Unix(st.Ctimespec.Sec, st.Ctimespec.Nsec)
	}
	return time.Time{}
}
