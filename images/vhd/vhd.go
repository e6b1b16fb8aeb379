// Package vhd writes and reads the 512-byte footer that turns a raw disk
// image into a fixed-size VHD (Microsoft's Virtual Hard Disk format, the
// form Hyper-V attaches). A fixed VHD is the raw disk followed by the
// footer, so the same file is still a raw disk to QEMU and
// Virtualization.framework, which ignore the trailing 512 bytes.
package vhd

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
)

// FooterSize is the size of the footer at the end of a VHD file.
const FooterSize = 512

const (
	cookie        = "conectix"
	featuresRes   = 0x00000002 // "reserved" bit, always set
	formatVersion = 0x00010000
	fixedOffset   = ^uint64(0) // data offset of a fixed disk
	diskFixed     = 2
	creatorApp    = "arlk"
	creatorHostOS = 0x5769326B // "Wi2k"
)

// ErrNoFooter means the file does not end in a valid fixed-VHD footer.
var ErrNoFooter = errors.New("vhd: no valid fixed-disk footer")

// Footer returns the footer of a fixed disk of size bytes (a multiple of
// 512) with the given unique id. The timestamp is left at zero (the year
// 2000) so that equal inputs give equal files.
func Footer(size int64, id [16]byte) ([]byte, error) {
	if size <= 0 || size%512 != 0 {
		return nil, fmt.Errorf("vhd: disk size %d is not a positive multiple of 512", size)
	}
	b := make([]byte, FooterSize)
	be := binary.BigEndian
	copy(b[0:8], cookie)
	be.PutUint32(b[8:], featuresRes)
	be.PutUint32(b[12:], formatVersion)
	be.PutUint64(b[16:], fixedOffset)
	// b[24:28] timestamp: zero.
	copy(b[28:32], creatorApp)
	be.PutUint32(b[32:], 0x00010000)
	be.PutUint32(b[36:], creatorHostOS)
	be.PutUint64(b[40:], uint64(size))
	be.PutUint64(b[48:], uint64(size))
	c, h, s := Geometry(size)
	be.PutUint16(b[56:], c)
	b[58], b[59] = h, s
	be.PutUint32(b[60:], diskFixed)
	copy(b[68:84], id[:])
	be.PutUint32(b[64:], checksum(b))
	return b, nil
}

// checksum is the one's complement of the sum of every footer byte except
// the checksum field itself.
func checksum(b []byte) uint32 {
	var sum uint32
	for i, x := range b[:FooterSize] {
		if i >= 64 && i < 68 {
			continue
		}
		sum += uint32(x)
	}
	return ^sum
}

// Geometry is the cylinder/head/sector geometry the VHD specification
// derives from a disk size (its appendix algorithm), capped at the largest
// geometry the format can express.
func Geometry(size int64) (cylinders uint16, heads, sectors uint8) {
	total := uint64(size / 512)
	if total > 65535*16*255 {
		total = 65535 * 16 * 255
	}
	var spt, hds, cth uint64
	if total >= 65535*16*63 {
		spt, hds = 255, 16
		cth = total / spt
	} else {
		spt = 17
		cth = total / spt
		hds = (cth + 1023) / 1024
		if hds < 4 {
			hds = 4
		}
		if cth >= hds*1024 || hds > 16 {
			spt, hds = 31, 16
			cth = total / spt
		}
		if cth >= hds*1024 {
			spt, hds = 63, 16
			cth = total / spt
		}
	}
	return uint16(cth / hds), uint8(hds), uint8(spt)
}

// Append pads the raw disk at path to a multiple of 512 bytes with zeros
// and appends the fixed-VHD footer. It returns the disk size (without the
// footer).
func Append(path string, id [16]byte) (int64, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return 0, fmt.Errorf("vhd: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("vhd: %w", err)
	}
	size := (fi.Size() + 511) &^ 511
	foot, err := Footer(size, id)
	if err != nil {
		return 0, err
	}
	if _, err := f.WriteAt(foot, size); err != nil {
		return 0, fmt.Errorf("vhd: write footer: %w", err)
	}
	if err := f.Sync(); err != nil {
		return 0, fmt.Errorf("vhd: %w", err)
	}
	return size, f.Close()
}

// ReadFooter checks that r (of total length n) ends in a valid fixed-disk
// footer and returns the disk size it records.
func ReadFooter(r io.ReaderAt, n int64) (int64, error) {
	if n < FooterSize {
		return 0, ErrNoFooter
	}
	b := make([]byte, FooterSize)
	if _, err := r.ReadAt(b, n-FooterSize); err != nil {
		return 0, fmt.Errorf("vhd: read footer: %w", err)
	}
	be := binary.BigEndian
	switch {
	case !bytes.Equal(b[:8], []byte(cookie)):
		return 0, fmt.Errorf("%w: bad cookie", ErrNoFooter)
	case be.Uint32(b[60:]) != diskFixed:
		return 0, fmt.Errorf("%w: disk type %d is not fixed", ErrNoFooter, be.Uint32(b[60:]))
	case be.Uint32(b[64:]) != checksum(b):
		return 0, fmt.Errorf("%w: bad checksum", ErrNoFooter)
	}
	size := int64(be.Uint64(b[48:]))
	if size != n-FooterSize {
		return 0, fmt.Errorf("%w: records %d bytes of disk, the file holds %d", ErrNoFooter, size, n-FooterSize)
	}
	return size, nil
}
