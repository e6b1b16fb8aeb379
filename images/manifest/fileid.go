package manifest

import (
	"fmt"
	"io/fs"
	"time"
)

// FileIdentity describes fi so that any change to the file changes it
// (DigestCache; vm/qemu names its templates by the files they were made
// from), and says when the file last changed: its size and modification
// time, and where the platform has them (statIDs) its change time, which
// no writer can set, its inode and its device. On Windows a same-size
// rewrite that puts the old modification time back is not seen.
func FileIdentity(fi fs.FileInfo) (id string, changed time.Time) {
	changed = fi.ModTime()
	id = fmt.Sprintf("%d %d", fi.Size(), fi.ModTime().UnixNano())
	if ctime, ino, dev, ok := statIDs(fi); ok {
		id += fmt.Sprintf(" %d %d %d", ctime.UnixNano(), ino, dev)
		if ctime.After(changed) {
			changed = ctime
		}
	}
	return id, changed
}
