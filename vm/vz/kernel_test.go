package vz

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/vm"
)

// head returns a fake kernel of n bytes with magic written at off.
func head(n, off int, magic string) []byte {
	b := make([]byte, n)
	copy(b[off:], magic)
	return b
}

func TestCheckKernel(t *testing.T) {
	for _, tc := range []struct {
		name    string
		data    []byte
		wantErr string // "" means accepted
	}{
		{name: "raw arm64 Image", data: head(0x400, 0x38, "ARM\x64")},
		{name: "raw Image with an EFI stub", data: func() []byte { b := head(0x400, 0x38, "ARM\x64"); copy(b, "MZ"); return b }()},
		{name: "Image.gz", data: head(0x400, 0, "\x1f\x8b\x08"), wantErr: "gzip-compressed"},
		{name: "Image.xz", data: head(0x400, 0, "\xfd7zXZ\x00"), wantErr: "xz-compressed"},
		{name: "Image.zst", data: head(0x400, 0, "\x28\xb5\x2f\xfd"), wantErr: "zstd-compressed"},
		{name: "EFI zboot vmlinuz", data: func() []byte { b := head(0x400, 0, "MZ"); copy(b[4:], "zimg"); return b }(), wantErr: "PE/EFI"},
		{name: "x86 bzImage", data: head(0x400, 0x202, "HdrS"), wantErr: "bzImage"},
		{name: "empty", data: nil, wantErr: "unknown format"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkKernel("arm64", bytes.NewReader(tc.data))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("checkKernel: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("checkKernel accepted it")
			}
			for _, want := range []string{tc.wantErr, "uncompressed", "make image"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q lacks %q", err, want)
				}
			}
			if !errors.Is(err, vm.ErrInvalidConfig) {
				t.Errorf("error %v is not vm.ErrInvalidConfig", err)
			}
		})
	}
}

func TestCheckKernelFile(t *testing.T) {
	dir := t.TempDir()
	if err := checkKernelFile("arm64", filepath.Join(dir, "missing")); !errors.Is(err, vm.ErrInvalidConfig) || !strings.Contains(err.Error(), "build the guest image") {
		t.Errorf("missing kernel: %v", err)
	}
	p := filepath.Join(dir, "Image")
	if err := os.WriteFile(p, head(0x400, 0x38, "ARM\x64"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := checkKernelFile("arm64", p); err != nil {
		t.Errorf("raw Image: %v", err)
	}
}

// TestCheckBuiltImage checks the arm64 kernel make image produced, when it
// is there: it is the file a Mac will boot.
func TestCheckBuiltImage(t *testing.T) {
	p := filepath.Join("..", "..", "images", "out", "arm64", "Image")
	if _, err := os.Stat(p); err != nil {
		t.Skip("no arm64 image built (make image-all)")
	}
	if err := checkKernelFile("arm64", p); err != nil {
		t.Fatal(err)
	}
}
