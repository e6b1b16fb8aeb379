package manifest

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
)

// Kernel formats DetectKernelFormat reports.
const (
	FormatARM64Image = "arm64 Image"
	FormatELF        = "ELF"
	FormatBzImage    = "x86 bzImage"
	FormatGzip       = "gzip"
	FormatXZ         = "xz"
	FormatZstd       = "zstd"
	FormatBzip2      = "bzip2"
	FormatLZ4        = "lz4"
	FormatPE         = "PE/EFI (compressed EFI zboot or other)"
	FormatUnknown    = "unknown"
)

// xenElfnotePhys32Entry is XEN_ELFNOTE_PHYS32_ENTRY: the 32-bit entry point
// a PVH loader (QEMU -kernel, Firecracker, cloud-hypervisor) jumps to.
const xenElfnotePhys32Entry = 18

// headLen is how much of a kernel DetectKernelFormat needs to see.
const headLen = 0x210

// DetectKernelFormat names the format of a kernel file from its first bytes
// (at least 0x210 of them for the bzImage check).
func DetectKernelFormat(head []byte) string {
	at := func(off int, magic string) bool {
		return len(head) >= off+len(magic) && string(head[off:off+len(magic)]) == magic
	}
	switch {
	// An arm64 Image with an EFI stub also starts with "MZ"; its magic wins.
	case at(0x38, "ARM\x64"):
		return FormatARM64Image
	case at(0, "\x7fELF"):
		return FormatELF
	case at(0x202, "HdrS"):
		return FormatBzImage
	case at(0, "\x1f\x8b"):
		return FormatGzip
	case at(0, "\xfd7zXZ\x00"):
		return FormatXZ
	case at(0, "\x28\xb5\x2f\xfd"):
		return FormatZstd
	case at(0, "BZh"):
		return FormatBzip2
	case at(0, "\x04\x22\x4d\x18"), at(0, "\x02\x21\x4c\x18"):
		return FormatLZ4
	case at(0, "MZ"):
		return FormatPE
	}
	return FormatUnknown
}

// CheckKernelFile checks the kernel at path with CheckKernel.
func CheckKernelFile(arch, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("kernel: %w", err)
	}
	defer f.Close()
	return CheckKernel(arch, f)
}

// CheckKernel checks that r holds a kernel every Airlock backend can boot
// without firmware or decompression: for arm64 a raw Image (Apple
// Virtualization refuses compressed ones), for amd64 an uncompressed ELF
// vmlinux with a PVH entry note (what QEMU's -kernel and HCS direct boot
// use). Any other format is refused with an error naming it.
func CheckKernel(arch string, r io.ReaderAt) error {
	head := make([]byte, headLen)
	n, err := r.ReadAt(head, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("kernel: read: %w", err)
	}
	head = head[:n]
	format := DetectKernelFormat(head)
	switch arch {
	case "arm64":
		if format != FormatARM64Image {
			return fmt.Errorf("kernel is %s, arm64 needs an uncompressed arm64 Image (magic \"ARM\\x64\" at 0x38)", describe(format))
		}
		return nil
	case "amd64":
		if format != FormatELF {
			return fmt.Errorf("kernel is %s, amd64 needs an uncompressed ELF vmlinux with a PVH entry note", describe(format))
		}
		return checkPVH(r)
	}
	return fmt.Errorf("kernel: unknown architecture %q", arch)
}

func describe(format string) string {
	switch format {
	case FormatUnknown:
		return "in an unknown format"
	case FormatGzip, FormatXZ, FormatZstd, FormatBzip2, FormatLZ4:
		return format + "-compressed"
	case FormatARM64Image, FormatELF:
		return "an " + format
	}
	return "a " + format
}

// checkPVH looks for the Xen PHYS32_ENTRY note in the ELF's note segments
// (or note sections, if the file has no program headers).
func checkPVH(r io.ReaderAt) error {
	f, err := elf.NewFile(r)
	if err != nil {
		return fmt.Errorf("kernel is not a readable ELF file: %w", err)
	}
	if f.Machine != elf.EM_X86_64 {
		return fmt.Errorf("kernel is an ELF file for %v, amd64 needs EM_X86_64", f.Machine)
	}
	var notes []io.Reader
	for _, p := range f.Progs {
		if p.Type == elf.PT_NOTE {
			notes = append(notes, p.Open())
		}
	}
	if len(notes) == 0 {
		for _, s := range f.Sections {
			if s.Type == elf.SHT_NOTE {
				notes = append(notes, s.Open())
			}
		}
	}
	for _, n := range notes {
		ok, err := hasNote(n, f.ByteOrder, "Xen", xenElfnotePhys32Entry)
		if err != nil {
			return fmt.Errorf("kernel: read ELF notes: %w", err)
		}
		if ok {
			return nil
		}
	}
	return errors.New("kernel is an ELF vmlinux without a PVH entry note (XEN_ELFNOTE_PHYS32_ENTRY); build it with CONFIG_PVH=y")
}

// maxNotes bounds how much note data is read; a kernel has a few KiB.
const maxNotes = 1 << 20

// hasNote reports whether the ELF note stream r holds a note with the given
// owner name and type. Notes are 4-byte aligned in ELF64 kernels.
func hasNote(r io.Reader, bo binary.ByteOrder, name string, typ uint32) (bool, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxNotes))
	if err != nil {
		return false, err
	}
	align := func(n uint32) uint64 { return (uint64(n) + 3) &^ 3 }
	for len(b) >= 12 {
		namesz, descsz, t := bo.Uint32(b[0:4]), bo.Uint32(b[4:8]), bo.Uint32(b[8:12])
		b = b[12:]
		if align(namesz)+align(descsz) > uint64(len(b)) {
			return false, errors.New("truncated note")
		}
		n := bytes.TrimRight(b[:namesz], "\x00")
		if t == typ && string(n) == name {
			return true, nil
		}
		b = b[align(namesz)+align(descsz):]
	}
	return false, nil
}
