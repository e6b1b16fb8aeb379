package changes

import (
	"errors"
	"os"
	"time"
)

// noFollow is 0: os.Root refuses to follow a symlink out of the root on
// Windows too, and Airlock checks the type with Lstat first.
const noFollow = 0

// linkInto is unsupported on Windows: Apply copies instead.
func linkInto(*os.File, string, string) error { return errors.ErrUnsupported }

// linkOut is unsupported on Windows: Apply copies what it keeps.
func linkOut(*os.File, string, string) error { return errors.ErrUnsupported }

// asFolderOwner does nothing on Windows: a new file inherits the folder's
// ACL, and Airlock never runs as another user there.
func asFolderOwner(*os.Root, string) error { return nil }

// setLinkTime does nothing on Windows: links there are rare, need a
// privilege to make, and os.Root offers no way to time one itself.
func setLinkTime(*os.Root, string, time.Time) error { return nil }
