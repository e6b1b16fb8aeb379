package wine

import (
	"bytes"
	"debug/pe"
	"encoding/binary"
	"testing"
)

// TestBcryptPrimitives reads the DLL back with debug/pe: a 64-bit DLL
// whose one export, ProcessPrng, forwards to advapi32.SystemFunction036.
// (That Wine loads it and Go programs start is what the Wine test shows.)
func TestBcryptPrimitives(t *testing.T) {
	b := BcryptPrimitives()
	f, err := pe.NewFile(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if f.Machine != pe.IMAGE_FILE_MACHINE_AMD64 || f.Characteristics&pe.IMAGE_FILE_DLL == 0 {
		t.Fatalf("machine %#x, characteristics %#x: want an AMD64 DLL", f.Machine, f.Characteristics)
	}
	oh, ok := f.OptionalHeader.(*pe.OptionalHeader64)
	if !ok {
		t.Fatal("not PE32+")
	}
	dir := oh.DataDirectory[pe.IMAGE_DIRECTORY_ENTRY_EXPORT]
	sec := f.Sections[0]
	data, err := sec.Data()
	if err != nil {
		t.Fatal(err)
	}
	at := func(rva uint32) []byte { return data[rva-sec.VirtualAddress:] }
	cstr := func(rva uint32) string { s := at(rva); return string(s[:bytes.IndexByte(s, 0)]) }
	le := binary.LittleEndian
	ed := at(dir.VirtualAddress)
	if n := le.Uint32(ed[24:]); n != 1 {
		t.Fatalf("%d names, want 1", n)
	}
	if got := cstr(le.Uint32(ed[12:])); got != "bcryptprimitives.dll" {
		t.Errorf("DLL name %q", got)
	}
	if got := cstr(le.Uint32(at(le.Uint32(ed[32:])))); got != "ProcessPrng" {
		t.Errorf("export %q, want ProcessPrng", got)
	}
	fn := le.Uint32(at(le.Uint32(ed[28:])))
	if fn < dir.VirtualAddress || fn >= dir.VirtualAddress+dir.Size {
		t.Fatalf("ProcessPrng at %#x is not a forwarder (export directory %#x+%#x)", fn, dir.VirtualAddress, dir.Size)
	}
	if got := cstr(fn); got != "advapi32.SystemFunction036" {
		t.Errorf("forwards to %q", got)
	}
	if !bytes.Equal(b, BcryptPrimitives()) {
		t.Error("two builds differ")
	}
}
