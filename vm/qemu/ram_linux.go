package qemu

import (
	"errors"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// haveRAMFiles says whether this host has memory files for a parking
// guest's RAM (newRAM): templates need them.
const haveRAMFiles = true

// newRAM makes the memory file a parking guest's RAM lives in (template.go):
// an anonymous shared-memory file of size bytes, all of it holes until the
// guest touches it, handed to QEMU as memory-backend-file. The host keeps
// its own descriptor, to copy the guest's memory into a template and to
// fill it from one.
func newRAM(size int64) (*os.File, error) {
	fd, err := unix.MemfdCreate("airlock-guest-ram", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("guest memory: memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), "airlock-guest-ram")
	if err := f.Truncate(size); err != nil {
		f.Close()
		return nil, fmt.Errorf("guest memory: %w", err)
	}
	return f, nil
}

// copyData makes dst hold what src holds, size bytes of it: it copies
// src's data and skips its holes (SEEK_DATA, SEEK_HOLE), which read as
// zeros in dst too. A guest's memory file is mostly holes: a parked guest
// of 1 GiB has touched some 60 MB. It returns how many bytes it copied.
func copyData(dst, src *os.File, size int64) (int64, error) {
	if err := dst.Truncate(size); err != nil {
		return 0, err
	}
	var copied int64
	buf := make([]byte, 1<<20)
	for off := int64(0); off < size; {
		start, err := unix.Seek(int(src.Fd()), off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // nothing but a hole from off on
		}
		if err != nil {
			return copied, fmt.Errorf("seek data: %w", err)
		}
		end, err := unix.Seek(int(src.Fd()), start, unix.SEEK_HOLE)
		if err != nil {
			return copied, fmt.Errorf("seek hole: %w", err)
		}
		end = min(end, size)
		if start >= end {
			break
		}
		n, err := io.CopyBuffer(io.NewOffsetWriter(dst, start), io.NewSectionReader(src, start, end-start), buf)
		copied += n
		if err != nil {
			return copied, err
		}
		off = end
	}
	return copied, nil
}
