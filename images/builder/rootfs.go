package builder

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/Microsoft/hcsshim/ext4/tar2ext4"

	"github.com/airlock-sandbox/airlock/images/vhd"
)

// Where the fields the builder sets after tar2ext4 lie. The ext4
// superblock starts 1024 bytes into the disk (the kernel's struct
// ext4_super_block: s_feature_ro_compat at 0x64, s_uuid at 0x68,
// s_volume_name at 0x78); the VHD footer's unique id is bytes 68-84 and
// its checksum bytes 64-68 (the VHD specification's footer layout, as
// images/vhd writes it).
const (
	sbStart       = 1024
	sbRoCompatOff = 0x64
	sbUUIDOff     = 0x68
	sbLabelOff    = 0x78
	sbLabelLen    = 16
	sbMagicOff    = 0x38
	sbBlocksOff   = 0x04 // s_blocks_count_lo
	sbBPGOff      = 0x20 // s_blocks_per_group
	sbIPGOff      = 0x28 // s_inodes_per_group
	sbLogBlockOff = 0x18 // s_log_block_size
	blockSize     = 4096 // compactext4's only block size
	gdSize        = 32   // compactext4's group descriptors: no 64bit feature
	gdInodeBitmap = 4    // bg_inode_bitmap_lo in a group descriptor

	// roCompatGdtCsum and roCompatMetadataCsum are the features under
	// which the superblock and group descriptors carry checksums that a
	// change to the label or UUID would have to update. hcsshim v0.15.0's
	// compactext4 sets neither (its Close writes FeatureRoCompat
	// LargeFile|HugeFile|ExtraIsize|Readonly), so the label is a plain
	// write; a later version that sets them is refused rather than left
	// with a stale checksum.
	roCompatGdtCsum      = 0x0010
	roCompatMetadataCsum = 0x0400

	footerIDOff  = 68
	footerSumOff = 64
)

// writeRootDisk writes the tree at root as an ext4 file system into the
// file disk with hcsshim's tar2ext4 (the writer hcsshim builds LCOW layer
// VHDs with), its fixed-VHD footer appended. It then writes what tar2ext4
// leaves out or makes random: the volume label the guest finds the disk
// by (api.RootLabel), a UUID, and the footer's unique id, the last two
// from key, so the same tree and key give the same bytes. It returns the
// size of the disk without its footer.
//
// The file system is as big as its contents (no free space: it is
// mounted read-only, and compactext4 marks it RO_COMPAT_READONLY), its
// directories are linear (no htree index) and it has no journal.
func writeRootDisk(root, disk, key string) (int64, error) {
	if len(key) < 32 {
		return 0, fmt.Errorf("images: standard image: key %q is too short", key)
	}
	id, err := hex.DecodeString(key[:32])
	if err != nil {
		return 0, fmt.Errorf("images: standard image: key %q is not hex", key)
	}
	f, err := os.Create(disk)
	if err != nil {
		return 0, fmt.Errorf("images: %w", err)
	}
	defer f.Close()
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeTree(pw, root)) }()
	err = tar2ext4.Convert(pr, f, tar2ext4.AppendVhdFooter)
	// Unblock the tree writer if the conversion stopped early.
	pr.CloseWithError(errors.New("the ext4 writer stopped"))
	if err != nil {
		return 0, fmt.Errorf("images: standard image: ext4 from %s: %w", root, err)
	}
	if err := setIdentity(f, toID(id)); err != nil {
		return 0, err
	}
	fi, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("images: %w", err)
	}
	size, err := vhd.ReadFooter(f, fi.Size())
	if err != nil {
		return 0, fmt.Errorf("images: standard image: tar2ext4's footer: %w", err)
	}
	if err := f.Sync(); err != nil {
		return 0, fmt.Errorf("images: %w", err)
	}
	return size, f.Close()
}

// padInodeBitmaps sets the bits past the last inode of each group in its
// inode bitmap block, as ext4 expects (e2fsck: "Padding at end of inode
// bitmap is not set"). compactext4 v0.15.0 leaves them clear whenever a
// group has fewer than 32768 inodes, which is nearly always; the kernel
// does not mind, but e2fsck exits 4 on the disk (microsoft/hcsshim#2811,
// open, makes the same fix). Without gdt_csum or metadata_csum neither the
// bitmaps nor the group descriptors carry a checksum to update.
func padInodeBitmaps(f *os.File, sb []byte) error {
	le := binary.LittleEndian
	blocks, perGroup, ipg := le.Uint32(sb[sbBlocksOff:]), le.Uint32(sb[sbBPGOff:]), le.Uint32(sb[sbIPGOff:])
	if perGroup == 0 || ipg == 0 || ipg > blockSize*8 || 1024<<le.Uint32(sb[sbLogBlockOff:]) != blockSize {
		return fmt.Errorf("images: standard image: unexpected ext4 geometry (%d blocks per group, %d inodes per group)", perGroup, ipg)
	}
	groups := (blocks + perGroup - 1) / perGroup
	gds := make([]byte, int(groups)*gdSize)
	if _, err := f.ReadAt(gds, blockSize); err != nil {
		return fmt.Errorf("images: standard image: read the group descriptors: %w", err)
	}
	bitmap := make([]byte, blockSize)
	for g := range groups {
		at := int64(le.Uint32(gds[int(g)*gdSize+gdInodeBitmap:])) * blockSize
		if _, err := f.ReadAt(bitmap, at); err != nil {
			return fmt.Errorf("images: standard image: read group %d's inode bitmap: %w", g, err)
		}
		for i := ipg; i < blockSize*8; i++ {
			bitmap[i/8] |= 1 << (i % 8)
		}
		if _, err := f.WriteAt(bitmap, at); err != nil {
			return fmt.Errorf("images: standard image: write group %d's inode bitmap: %w", g, err)
		}
	}
	return nil
}

func toID(b []byte) (id [16]byte) {
	copy(id[:], b)
	return id
}

// setIdentity writes the label RootLabel and the UUID id into the ext4
// superblock of the fixed VHD f, and id as the footer's unique id (with
// its checksum).
func setIdentity(f *os.File, id [16]byte) error {
	sb := make([]byte, 1024)
	if _, err := f.ReadAt(sb, sbStart); err != nil {
		return fmt.Errorf("images: standard image: read the superblock: %w", err)
	}
	if binary.LittleEndian.Uint16(sb[sbMagicOff:]) != 0xEF53 {
		return errors.New("images: standard image: tar2ext4 wrote no ext4 superblock")
	}
	if ro := binary.LittleEndian.Uint32(sb[sbRoCompatOff:]); ro&(roCompatGdtCsum|roCompatMetadataCsum) != 0 {
		return fmt.Errorf("images: standard image: tar2ext4's file system has checksummed metadata (ro_compat %#x): setting its label would need the checksums updated", ro)
	}
	var label [sbLabelLen]byte
	copy(label[:], RootLabel)
	if _, err := f.WriteAt(label[:], sbStart+sbLabelOff); err != nil {
		return fmt.Errorf("images: standard image: write the label: %w", err)
	}
	if err := padInodeBitmaps(f, sb); err != nil {
		return err
	}
	uuid := id
	uuid[6] = uuid[6]&0x0f | 0x40 // version 4, variant 10: a well-formed random-looking UUID
	uuid[8] = uuid[8]&0x3f | 0x80
	if _, err := f.WriteAt(uuid[:], sbStart+sbUUIDOff); err != nil {
		return fmt.Errorf("images: standard image: write the UUID: %w", err)
	}

	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("images: %w", err)
	}
	if fi.Size() < vhd.FooterSize {
		return errors.New("images: standard image: no VHD footer")
	}
	foot := make([]byte, vhd.FooterSize)
	if _, err := f.ReadAt(foot, fi.Size()-vhd.FooterSize); err != nil {
		return fmt.Errorf("images: standard image: read the footer: %w", err)
	}
	copy(foot[footerIDOff:], id[:])
	var sum uint32
	for i, x := range foot {
		if i < footerSumOff || i >= footerSumOff+4 {
			sum += uint32(x)
		}
	}
	binary.BigEndian.PutUint32(foot[footerSumOff:], ^sum)
	if _, err := f.WriteAt(foot, fi.Size()-vhd.FooterSize); err != nil {
		return fmt.Errorf("images: standard image: write the footer: %w", err)
	}
	return nil
}
