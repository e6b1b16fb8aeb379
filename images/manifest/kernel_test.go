package manifest

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
)

// Synthetic kernels: only the bytes the checks look at are real.

func arm64Image() []byte {
	b := make([]byte, 0x240)
	copy(b, "MZ") // EFI stub, as in Debian's Image
	copy(b[0x38:], "ARM\x64")
	return b
}

func bzImage() []byte {
	b := make([]byte, 0x400)
	b[0x1f1] = 1
	copy(b[0x202:], "HdrS")
	binary.LittleEndian.PutUint16(b[0x206:], 0x20f)
	return b
}

func withMagic(magic string) []byte {
	b := make([]byte, 0x240)
	copy(b, magic)
	return b
}

// elfNote builds one ELF note with 4-byte alignment.
func elfNote(name string, typ uint32, desc []byte) []byte {
	var b bytes.Buffer
	le := binary.LittleEndian
	binary.Write(&b, le, uint32(len(name)+1))
	binary.Write(&b, le, uint32(len(desc)))
	binary.Write(&b, le, typ)
	b.WriteString(name + "\x00")
	for b.Len()%4 != 0 {
		b.WriteByte(0)
	}
	b.Write(desc)
	for b.Len()%4 != 0 {
		b.WriteByte(0)
	}
	return b.Bytes()
}

// elf64 builds a minimal little-endian ELF64 executable for machine with
// one PT_NOTE segment holding notes.
func elf64(machine uint16, notes []byte) []byte {
	const ehsize, phentsize = 64, 56
	var b bytes.Buffer
	le := binary.LittleEndian
	b.Write([]byte{0x7f, 'E', 'L', 'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	w := func(v any) { binary.Write(&b, le, v) }
	w(uint16(2))                  // ET_EXEC
	w(machine)                    // e_machine
	w(uint32(1))                  // e_version
	w(uint64(0x1000000))          // e_entry
	w(uint64(ehsize))             // e_phoff
	w(uint64(0))                  // e_shoff
	w(uint32(0))                  // e_flags
	w(uint16(ehsize))             // e_ehsize
	w(uint16(phentsize))          // e_phentsize
	w(uint16(1))                  // e_phnum
	w(uint16(64))                 // e_shentsize
	w(uint16(0))                  // e_shnum
	w(uint16(0))                  // e_shstrndx
	w(uint32(4))                  // p_type PT_NOTE
	w(uint32(4))                  // p_flags R
	w(uint64(ehsize + phentsize)) // p_offset
	w(uint64(0))                  // p_vaddr
	w(uint64(0))                  // p_paddr
	w(uint64(len(notes)))         // p_filesz
	w(uint64(len(notes)))         // p_memsz
	w(uint64(4))                  // p_align
	b.Write(notes)
	for b.Len() < headLen {
		b.WriteByte(0)
	}
	return b.Bytes()
}

const (
	emX86_64  = 62
	emAArch64 = 183
)

func pvhVmlinux() []byte {
	notes := append(elfNote("GNU", 3, []byte("buildid!")), elfNote("Xen", xenElfnotePhys32Entry, []byte{0, 0, 0, 1})...)
	return elf64(emX86_64, notes)
}

func TestDetectKernelFormat(t *testing.T) {
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"arm64 Image", arm64Image(), FormatARM64Image},
		{"ELF", pvhVmlinux(), FormatELF},
		{"bzImage", bzImage(), FormatBzImage},
		{"gzip", withMagic("\x1f\x8b\x08"), FormatGzip},
		{"xz", withMagic("\xfd7zXZ\x00"), FormatXZ},
		{"zstd", withMagic("\x28\xb5\x2f\xfd"), FormatZstd},
		{"bzip2", withMagic("BZh9"), FormatBzip2},
		{"lz4", withMagic("\x02\x21\x4c\x18"), FormatLZ4},
		{"PE without arm64 magic", withMagic("MZ"), FormatPE},
		{"zeros", make([]byte, 0x240), FormatUnknown},
		{"empty", nil, FormatUnknown},
		{"short", []byte("AR"), FormatUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := DetectKernelFormat(tt.data); got != tt.want {
				t.Errorf("DetectKernelFormat = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestCheckKernel(t *testing.T) {
	tests := []struct {
		name    string
		arch    string
		data    []byte
		wantErr string // substring; empty means success
	}{
		{"arm64 raw Image", "arm64", arm64Image(), ""},
		{"arm64 gzip", "arm64", withMagic("\x1f\x8b\x08"), "gzip-compressed"},
		{"arm64 given an ELF", "arm64", pvhVmlinux(), "ELF"},
		{"arm64 unknown", "arm64", make([]byte, 16), "unknown format"},
		{"amd64 PVH vmlinux", "amd64", pvhVmlinux(), ""},
		{"amd64 vmlinux without PVH", "amd64", elf64(emX86_64, elfNote("GNU", 3, []byte("buildid!"))), "without a PVH entry note"},
		{"amd64 vmlinux, Xen note of another type", "amd64", elf64(emX86_64, elfNote("Xen", 1, []byte("linux\x00\x00\x00"))), "without a PVH entry note"},
		{"amd64 ELF for arm64", "amd64", elf64(emAArch64, elfNote("Xen", xenElfnotePhys32Entry, []byte{1, 2, 3, 4})), "EM_AARCH64"},
		{"amd64 truncated note", "amd64", elf64(emX86_64, []byte{4, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 18, 0, 0, 0}), "truncated note"},
		{"amd64 bzImage", "amd64", bzImage(), "x86 bzImage"},
		{"amd64 xz", "amd64", withMagic("\xfd7zXZ\x00"), "xz-compressed"},
		{"amd64 zstd", "amd64", withMagic("\x28\xb5\x2f\xfd"), "zstd-compressed"},
		{"amd64 given an arm64 Image", "amd64", arm64Image(), "arm64 Image"},
		{"unknown arch", "riscv64", arm64Image(), "unknown architecture"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckKernel(tt.arch, bytes.NewReader(tt.data))
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("CheckKernel: %v", err)
			case tt.wantErr != "" && err == nil:
				t.Fatalf("CheckKernel succeeded, want error containing %q", tt.wantErr)
			case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
				t.Fatalf("CheckKernel error %q does not contain %q", err, tt.wantErr)
			}
		})
	}
}
