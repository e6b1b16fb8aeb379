//go:build !linux && !darwin

package changes

import (
	"io/fs"
	"time"
)

// changeTime is zero: only unix keeps a ctime no tool can set back.
func changeTime(fs.FileInfo) time.Time { return time.Time{} }
