//go:build !linux

package builder

import (
	"errors"
	"io"
)

// writeTree needs Linux's view of a tree (owners, device numbers,
// extended attributes): the standard image is built on Linux only, as
// debootstrap runs there.
func writeTree(io.Writer, string) error {
	return errors.New("images: the standard image's root disk is built on Linux only")
}
