package vhd

import (
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestGeometry(t *testing.T) {
	// Values from the VHD specification's algorithm, worked by hand.
	for _, tc := range []struct {
		size int64
		c    uint16
		h, s uint8
	}{
		{10 << 20, 301, 4, 17},      // 20480 sectors: 1204 per head... /4 heads
		{1 << 30, 2080, 16, 63},     // 2097152 sectors
		{3 << 40, 65535, 16, 255},   // capped
		{127 << 30, 65278, 16, 255}, // >= 65535*16*63 sectors: 255 spt
	} {
		c, h, s := Geometry(tc.size)
		if c != tc.c || h != tc.h || s != tc.s {
			t.Errorf("Geometry(%d) = %d/%d/%d, want %d/%d/%d", tc.size, c, h, s, tc.c, tc.h, tc.s)
		}
	}
}

func TestFooterRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "d.vhd")
	if err := os.WriteFile(path, make([]byte, 3000), 0o644); err != nil {
		t.Fatal(err)
	}
	size, err := Append(path, [16]byte{1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	if size != 3072 {
		t.Fatalf("size %d, want 3000 padded to 3072", size)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	if fi.Size() != 3072+FooterSize {
		t.Fatalf("file is %d bytes", fi.Size())
	}
	got, err := ReadFooter(f, fi.Size())
	if err != nil || got != 3072 {
		t.Fatalf("ReadFooter = %d, %v", got, err)
	}

	// Any flipped byte is caught by the checksum (or the field checks).
	b, _ := os.ReadFile(path)
	for _, off := range []int{0, 40, 48, 60, 70, 511} {
		bad := append([]byte(nil), b...)
		bad[len(b)-FooterSize+off] ^= 0x40
		p := filepath.Join(t.TempDir(), "bad.vhd")
		os.WriteFile(p, bad, 0o644)
		bf, _ := os.Open(p)
		if _, err := ReadFooter(bf, int64(len(bad))); !errors.Is(err, ErrNoFooter) {
			t.Errorf("byte %d flipped: err %v, want ErrNoFooter", off, err)
		}
		bf.Close()
	}
}

func TestFooterFields(t *testing.T) {
	b, err := Footer(1<<20, [16]byte{9})
	if err != nil {
		t.Fatal(err)
	}
	be := binary.BigEndian
	if string(b[:8]) != "conectix" || be.Uint32(b[60:]) != 2 || be.Uint64(b[16:]) != ^uint64(0) || be.Uint64(b[48:]) != 1<<20 {
		t.Fatalf("footer fields wrong: % x", b[:72])
	}
	if _, err := Footer(1000, [16]byte{}); err == nil {
		t.Fatal("size not a multiple of 512 accepted")
	}
}

// TestQemuImgReadsIt checks the footer against an independent reader:
// qemu-img, told the file is a VHD (it probes only dynamic ones), must
// accept the footer and see the right virtual size (from the size field,
// as Hyper-V reads it; QEMU would otherwise use the rounded-down geometry).
func TestQemuImgReadsIt(t *testing.T) {
	if _, err := exec.LookPath("qemu-img"); err != nil {
		t.Skip("qemu-img not installed (apt: qemu-utils)")
	}
	path := filepath.Join(t.TempDir(), "d.vhd")
	if err := os.WriteFile(path, make([]byte, 10<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Append(path, [16]byte{7}); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("qemu-img", "info", "--output=json", "--image-opts", "driver=vpc,force_size_calc=current_size,file.filename="+path).CombinedOutput()
	if err != nil {
		t.Fatalf("qemu-img info: %v\n%s", err, out)
	}
	s := string(out)
	if !strings.Contains(s, `"format": "vpc"`) || !strings.Contains(s, `"virtual-size": 10485760`) {
		t.Fatalf("qemu-img does not see a 10 MiB VHD:\n%s", s)
	}
}
