//go:build !unix

package service

import "io/fs"

// allocated is what a file takes on disk; here, its length.
func allocated(fi fs.FileInfo) int64 { return fi.Size() }
