package builder

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock/images/manifest"
)

// kernelFile is the kernel's artifact name per architecture: what every
// backend can boot directly without firmware or decompression.
var kernelFile = map[string]string{
	"amd64": "vmlinux",
	"arm64": "Image",
}

var xzMagic = []byte{0xfd, '7', 'z', 'X', 'Z', 0x00}

// kernelHZ reads CONFIG_HZ, the kernel's timer rate, from its build
// config (Debian's /boot/config-<release>, or a source build's .config).
func kernelHZ(config string) (int, error) {
	f, err := os.Open(config)
	if err != nil {
		return 0, fmt.Errorf("images: kernel config: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), "CONFIG_HZ=")
		if !ok {
			continue
		}
		hz, err := strconv.Atoi(v)
		if err != nil || hz <= 0 || hz > manifest.MaxKernelHZ {
			return 0, fmt.Errorf("images: kernel config %s: CONFIG_HZ=%q is not a timer rate", config, v)
		}
		return hz, nil
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("images: kernel config %s: %w", config, err)
	}
	return 0, fmt.Errorf("images: kernel config %s has no CONFIG_HZ", config)
}

// writeKernel turns the packaged kernel (Debian's /boot/vmlinuz-*) into a
// directly bootable one at dst and checks its format.
func writeKernel(ctx context.Context, arch, vmlinuz, dst string) error {
	data, err := os.ReadFile(vmlinuz)
	if err != nil {
		return fmt.Errorf("images: kernel: %w", err)
	}
	switch arch {
	case "amd64":
		err = extractVmlinux(ctx, data, dst)
	case "arm64":
		err = writeARM64Image(data, dst)
	default:
		err = fmt.Errorf("unknown architecture %q", arch)
	}
	if err != nil {
		return fmt.Errorf("images: kernel %s: %w", vmlinuz, err)
	}
	if err := manifest.CheckKernelFile(arch, dst); err != nil {
		return fmt.Errorf("images: kernel %s: %w", vmlinuz, err)
	}
	return nil
}

// extractVmlinux pulls the ELF vmlinux out of an x86 bzImage whose payload
// is xz-compressed (Debian's choice). The setup header says where the
// payload starts; older headers fall back to a search for the xz magic.
func extractVmlinux(ctx context.Context, bz []byte, dst string) error {
	if f := manifest.DetectKernelFormat(bz); f != manifest.FormatBzImage {
		return fmt.Errorf("expected an x86 bzImage, found %s", f)
	}
	off := payloadOffset(bz)
	if off < 0 {
		off = bytes.Index(bz, xzMagic)
	}
	if off < 0 {
		return fmt.Errorf("no xz payload in the bzImage; only xz-compressed kernels are supported")
	}
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer out.Close()
	// --single-stream stops at the end of the payload and ignores the
	// bzImage trailer that follows it.
	cmd := exec.CommandContext(ctx, "xz", "-dc", "--single-stream")
	cmd.Stdin = bytes.NewReader(bz[off:])
	cmd.Stdout = out
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("xz -dc: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return out.Close()
}

// setupEnd is where the protected-mode part of a bzImage starts.
func setupEnd(bz []byte) int {
	sects := int(bz[0x1f1])
	if sects == 0 {
		sects = 4
	}
	return (sects + 1) * 512
}

// payloadOffset reads payload_offset from a boot protocol >= 2.08 setup
// header and returns the absolute offset of an xz payload, or -1.
func payloadOffset(bz []byte) int {
	if len(bz) < 0x250 || binary.LittleEndian.Uint16(bz[0x206:]) < 0x208 {
		return -1
	}
	off := setupEnd(bz) + int(binary.LittleEndian.Uint32(bz[0x248:]))
	if off < 0 || off+len(xzMagic) > len(bz) || !bytes.Equal(bz[off:off+len(xzMagic)], xzMagic) {
		return -1
	}
	return off
}

// writeARM64Image writes a raw arm64 Image, gunzipping it first if the
// package ships Image.gz (Debian 12 already ships the raw Image).
func writeARM64Image(data []byte, dst string) error {
	switch f := manifest.DetectKernelFormat(data); f {
	case manifest.FormatARM64Image:
	case manifest.FormatGzip:
		zr, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return fmt.Errorf("gunzip: %w", err)
		}
		if data, err = io.ReadAll(zr); err != nil {
			return fmt.Errorf("gunzip: %w", err)
		}
	default:
		return fmt.Errorf("expected an arm64 Image or Image.gz, found %s", f)
	}
	return os.WriteFile(dst, data, 0o644)
}
