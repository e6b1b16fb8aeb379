// Package wine runs the Windows programs under Wine: the installer, the VM
// service under Wine's service manager, the CLI against it and against
// `airlock serve`, the desktop app without WebView2 (wine_test.go, build tag
// wine; `make test-windows-wine`). This file makes the one DLL Wine 8.0
// lacks that a Go program needs.
package wine

import (
	"bytes"
	"encoding/binary"
)

// BcryptPrimitives is a bcryptprimitives.dll for a Wine prefix: a PE32+
// DLL with no code whose one export, ProcessPrng, forwards to
// advapi32.SystemFunction036 (RtlGenRandom). The Go runtime (1.22 on)
// loads ProcessPrng from bcryptprimitives.dll at start and stops with
// "bcryptprimitives.dll not found" without it; Wine added the DLL after
// 8.0, the version Debian 12 ships. The two functions fill a buffer with
// random bytes and return nonzero, taking (pointer, length) in the same
// registers; RtlGenRandom's length is 32 bits, more than any Go read.
//
// Written here (about a hundred bytes of headers) rather than compiled:
// the build has no Windows C compiler, and a forwarder needs no code.
func BcryptPrimitives() []byte {
	const (
		fileAlign = 0x200
		sectAlign = 0x1000
		sectRVA   = 0x1000
		dllName   = "bcryptprimitives.dll\x00"
		export    = "ProcessPrng\x00"
		forward   = "advapi32.SystemFunction036\x00"
	)
	le := binary.LittleEndian

	// The section: the export directory (40 bytes), then the address,
	// name pointer and ordinal tables (one entry each), then the strings.
	// A function address inside the export directory's range is a
	// forwarder: the loader reads it as "dll.function".
	var sec bytes.Buffer
	const (
		dirSize   = 40
		eatOff    = dirSize
		namesOff  = eatOff + 4
		ordsOff   = namesOff + 4
		stringOff = ordsOff + 2
	)
	nameRVA := sectRVA + stringOff
	exportRVA := nameRVA + len(dllName)
	forwardRVA := exportRVA + len(export)
	dirEnd := forwardRVA + len(forward)
	w := func(v any) { binary.Write(&sec, le, v) }
	w(uint32(0))                  // Characteristics
	w(uint32(0))                  // TimeDateStamp: 0 keeps the file reproducible
	w(uint16(0))                  // MajorVersion
	w(uint16(0))                  // MinorVersion
	w(uint32(nameRVA))            // Name
	w(uint32(1))                  // Base (first ordinal)
	w(uint32(1))                  // NumberOfFunctions
	w(uint32(1))                  // NumberOfNames
	w(uint32(sectRVA + eatOff))   // AddressOfFunctions
	w(uint32(sectRVA + namesOff)) // AddressOfNames
	w(uint32(sectRVA + ordsOff))  // AddressOfNameOrdinals
	w(uint32(forwardRVA))         // the function: a forwarder string
	w(uint32(exportRVA))          // its name
	w(uint16(0))                  // its ordinal, less Base
	sec.WriteString(dllName + export + forward)
	dirLen := dirEnd - sectRVA
	raw := make([]byte, (sec.Len()+fileAlign-1)/fileAlign*fileAlign)
	copy(raw, sec.Bytes())

	var f bytes.Buffer
	put := func(v any) { binary.Write(&f, le, v) }
	// DOS header: "MZ", and e_lfanew (offset 0x3c) pointing at 0x40.
	dos := make([]byte, 0x40)
	copy(dos, "MZ")
	le.PutUint32(dos[0x3c:], 0x40)
	f.Write(dos)
	f.WriteString("PE\x00\x00")
	// COFF file header.
	const optSize = 112 + 16*8
	put(uint16(0x8664))                   // Machine: AMD64
	put(uint16(1))                        // NumberOfSections
	put(uint32(0))                        // TimeDateStamp
	put(uint32(0))                        // PointerToSymbolTable
	put(uint32(0))                        // NumberOfSymbols
	put(uint16(optSize))                  // SizeOfOptionalHeader
	put(uint16(0x2000 | 0x0002 | 0x0020)) // DLL | EXECUTABLE_IMAGE | LARGE_ADDRESS_AWARE
	// Optional header, PE32+.
	headers := uint32((0x40 + 4 + 20 + optSize + 40 + fileAlign - 1) / fileAlign * fileAlign)
	imageSize := uint32(sectRVA + (len(raw)+sectAlign-1)/sectAlign*sectAlign)
	put(uint16(0x20b))       // Magic: PE32+
	put(uint16(0))           // linker version
	put(uint32(0))           // SizeOfCode
	put(uint32(len(raw)))    // SizeOfInitializedData
	put(uint32(0))           // SizeOfUninitializedData
	put(uint32(0))           // AddressOfEntryPoint: none
	put(uint32(0))           // BaseOfCode
	put(uint64(0x180000000)) // ImageBase
	put(uint32(sectAlign))   // SectionAlignment
	put(uint32(fileAlign))   // FileAlignment
	put(uint16(6))           // OS version 6.0
	put(uint16(0))
	put(uint32(0)) // image version
	put(uint16(6)) // subsystem version 6.0
	put(uint16(0))
	put(uint32(0))               // Win32VersionValue
	put(imageSize)               // SizeOfImage
	put(headers)                 // SizeOfHeaders
	put(uint32(0))               // CheckSum
	put(uint16(3))               // Subsystem: console
	put(uint16(0x0040 | 0x0100)) // DllCharacteristics: DYNAMIC_BASE (nothing to relocate) | NX_COMPAT
	put(uint64(0x100000))        // stack reserve, commit
	put(uint64(0x1000))
	put(uint64(0x100000)) // heap reserve, commit
	put(uint64(0x1000))
	put(uint32(0))       // LoaderFlags
	put(uint32(16))      // NumberOfRvaAndSizes
	put(uint32(sectRVA)) // data directory 0: exports
	put(uint32(dirLen))
	for i := 1; i < 16; i++ {
		put(uint64(0))
	}
	// Section header.
	var name [8]byte
	copy(name[:], ".rdata")
	f.Write(name[:])
	put(uint32(sec.Len()))               // VirtualSize
	put(uint32(sectRVA))                 // VirtualAddress
	put(uint32(len(raw)))                // SizeOfRawData
	put(headers)                         // PointerToRawData
	put(uint32(0))                       // PointerToRelocations
	put(uint32(0))                       // PointerToLinenumbers
	put(uint16(0))                       // NumberOfRelocations
	put(uint16(0))                       // NumberOfLinenumbers
	put(uint32(0x40000000 | 0x00000040)) // MEM_READ | CNT_INITIALIZED_DATA
	out := make([]byte, headers)
	copy(out, f.Bytes())
	return append(out, raw...)
}
