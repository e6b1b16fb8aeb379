//go:build linux || darwin

package manifest

import (
	"io/fs"
	"syscall"
	"time"
)

func statIDs(fi fs.FileInfo) (ctime time.Time, ino, dev uint64, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return time.Time{}, 0, 0, false
	}
	c := ctimeOf(st)
	return time.Unix(int64(c.Sec), int64(c.Nsec)), uint64(st.Ino), uint64(st.Dev), true
}
