package changes

import (
	"errors"
	"os"
)

// linkInto is unsupported on Windows: Apply copies instead.
func linkInto(*os.File, string, string) error { return errors.ErrUnsupported }
