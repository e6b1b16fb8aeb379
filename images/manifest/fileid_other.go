//go:build !linux && !darwin

package manifest

import (
	"fmt"
	"io/fs"
	"time"
)

// fileIdentity describes fi by size and modification time (see
// DigestCache): Windows has no change time a writer cannot set, so a
// same-size rewrite that puts the old modification time back is not seen.
func fileIdentity(fi fs.FileInfo) (id string, changed time.Time) {
	return fmt.Sprintf("%d %d", fi.Size(), fi.ModTime().UnixNano()), fi.ModTime()
}
