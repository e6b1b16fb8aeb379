//go:build !linux && !darwin

package manifest

import (
	"io/fs"
	"time"
)

func statIDs(fs.FileInfo) (ctime time.Time, ino, dev uint64, ok bool) {
	return time.Time{}, 0, 0, false
}
