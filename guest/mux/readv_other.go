//go:build !linux

package mux

import "io"

// vectorReader: readv is used on Linux only.
func vectorReader(io.Reader) func(a, b, c, d []byte) (int, error) { return nil }

// pagedReader: readv is used on Linux only.
func pagedReader(io.Reader) func(p []byte) (int, error) { return nil }
