//go:build !linux

package mux

import "io"

// spliceOut: splice(2) is Linux's.
type spliceOut struct{}

func newSpliceOut(io.ReadWriteCloser) *spliceOut { return nil }

func (*spliceOut) close() {}

func (s *Session) putPipe(ctrl, hdr, head []byte, t *pipeTail) error { return errNoSplice }
