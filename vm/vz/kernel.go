package vz

import (
	"fmt"
	"io"
	"os"

	"github.com/airlock-sandbox/airlock/images/manifest"
	"github.com/airlock-sandbox/airlock/vm"
)

// checkKernel refuses, before boot, a kernel VZLinuxBootLoader cannot
// start. On Apple silicon that is anything but a raw arm64 Image: the
// framework does not decompress, and a compressed kernel (Image.gz, an EFI
// zboot vmlinuz) fails only once the VM runs, with no useful message.
func checkKernel(arch string, r io.ReaderAt) error {
	if err := manifest.CheckKernel(arch, r); err != nil {
		return fmt.Errorf("vz: %w: %w; Apple Virtualization boots only an uncompressed kernel: rebuild the guest image (make image)", vm.ErrInvalidConfig, err)
	}
	return nil
}

// checkKernelFile is checkKernel on the file at path.
func checkKernelFile(arch, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("vz: %w: kernel: %w (build the guest image first)", vm.ErrInvalidConfig, err)
	}
	defer f.Close()
	return checkKernel(arch, f)
}
