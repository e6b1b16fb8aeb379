//go:build !linux

package qemu

import (
	"errors"
	"os"
)

const haveRAMFiles = false

var errNoRAMFile = errors.New("guest memory files need Linux")

func newRAM(int64) (*os.File, error) { return nil, errNoRAMFile }

func copyData(_, _ *os.File, _ int64) (int64, error) { return 0, errNoRAMFile }
