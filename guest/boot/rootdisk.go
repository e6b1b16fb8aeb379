package boot

import (
	"bytes"
	"encoding/binary"

	"github.com/airlock-sandbox/airlock/guest/api"
)

// Offsets in an ext2/3/4 superblock, which starts 1024 bytes into the disk.
const (
	sbOffset    = 1024
	sbMagicOff  = 0x38
	sbLabelOff  = 0x78
	sbLabelLen  = 16
	ext4Magic   = 0xEF53
	probeSize   = sbOffset + sbLabelOff + sbLabelLen
	diskUnknown = diskKind(0)
	diskExt     = diskKind(1) // an ext2/3/4 file system
	diskBlank   = diskKind(2) // a blank persistent disk (api.BlankDiskMagic)
	// diskBlankLayer is a blank changes layer disk (api.BlankLayerMagic).
	diskBlankLayer = diskKind(3)
)

type diskKind int

// probeDisk reads what the first probeSize bytes of a disk say: an ext
// file system and its label, a blank persistent disk, or neither. The
// bytes come from a device the host attached, so anything short or odd is
// simply diskUnknown.
func probeDisk(head []byte) (diskKind, string) {
	if bytes.HasPrefix(head, []byte(api.BlankDiskMagic)) {
		return diskBlank, ""
	}
	if bytes.HasPrefix(head, []byte(api.BlankLayerMagic)) {
		return diskBlankLayer, ""
	}
	if len(head) < probeSize {
		return diskUnknown, ""
	}
	sb := head[sbOffset:]
	if binary.LittleEndian.Uint16(sb[sbMagicOff:]) != ext4Magic {
		return diskUnknown, ""
	}
	label := sb[sbLabelOff : sbLabelOff+sbLabelLen]
	if i := bytes.IndexByte(label, 0); i >= 0 {
		label = label[:i]
	}
	return diskExt, string(label)
}
