package builder

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// writeFixture writes content to dir/rel, creating folders.
func writeFixture(t *testing.T, dir, rel, content string) string {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func needTool(t *testing.T, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Skipf("%s not installed", name)
	}
}

func xzCompress(t *testing.T, data []byte) []byte {
	t.Helper()
	needTool(t, "xz")
	cmd := exec.Command("xz", "-c", "--check=crc32")
	cmd.Stdin = bytes.NewReader(data)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("xz: %v", err)
	}
	return out
}

// pvhELF is a minimal x86-64 ELF with a PT_NOTE segment holding the Xen
// PHYS32_ENTRY note, padded past the format check's header length.
func pvhELF() []byte {
	var b bytes.Buffer
	le := binary.LittleEndian
	w := func(v any) { binary.Write(&b, le, v) }
	b.Write([]byte{0x7f, 'E', 'L', 'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	w(uint16(2))
	w(uint16(62))
	w(uint32(1))
	w(uint64(0))
	w(uint64(64))
	w(uint64(0))
	w(uint32(0))
	w(uint16(64))
	w(uint16(56))
	w(uint16(1))
	w(uint16(64))
	w(uint16(0))
	w(uint16(0))
	w(uint32(4)) // PT_NOTE
	w(uint32(4))
	w(uint64(120))
	w(uint64(0))
	w(uint64(0))
	w(uint64(20))
	w(uint64(20))
	w(uint64(4))
	w(uint32(4)) // namesz
	w(uint32(4)) // descsz
	w(uint32(18))
	b.WriteString("Xen\x00")
	w(uint32(0x1000000))
	b.Write(make([]byte, 0x300))
	return b.Bytes()
}

// fakeBzImage wraps payload like an x86 bzImage: setup sectors, a setup
// header whose payload_offset points at it, and a trailer after it.
func fakeBzImage(payload []byte, withOffset bool) []byte {
	const setupSects = 3
	setup := (setupSects + 1) * 512
	pm := make([]byte, 0x80) // decompressor stub before the payload
	b := make([]byte, setup)
	b[0x1f1] = setupSects
	copy(b[0x202:], "HdrS")
	binary.LittleEndian.PutUint16(b[0x206:], 0x20f)
	if withOffset {
		binary.LittleEndian.PutUint32(b[0x248:], uint32(len(pm)))
		binary.LittleEndian.PutUint32(b[0x24c:], uint32(len(payload)))
	} else {
		binary.LittleEndian.PutUint16(b[0x206:], 0x207)
	}
	b = append(b, pm...)
	b = append(b, payload...)
	return append(b, []byte("trailer: not part of the xz stream")...)
}

func TestWriteKernelAMD64(t *testing.T) {
	vmlinux := pvhELF()
	for _, withOffset := range []bool{true, false} {
		src := filepath.Join(t.TempDir(), "vmlinuz")
		if err := os.WriteFile(src, fakeBzImage(xzCompress(t, vmlinux), withOffset), 0o644); err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(t.TempDir(), "vmlinux")
		if err := writeKernel(t.Context(), "amd64", src, dst); err != nil {
			t.Fatalf("writeKernel (payload_offset %v): %v", withOffset, err)
		}
		got, _ := os.ReadFile(dst)
		if !bytes.Equal(got, vmlinux) {
			t.Errorf("extracted vmlinux differs (payload_offset %v)", withOffset)
		}
	}
}

func TestWriteKernelARM64(t *testing.T) {
	image := make([]byte, 0x400)
	copy(image, "MZ")
	copy(image[0x38:], "ARM\x64")
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(image)
	zw.Close()
	tests := []struct {
		name    string
		in      []byte
		wantErr string
	}{
		{"raw Image", image, ""},
		{"Image.gz", gz.Bytes(), ""},
		{"zstd", append([]byte("\x28\xb5\x2f\xfd"), make([]byte, 0x300)...), "found zstd"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := filepath.Join(t.TempDir(), "vmlinuz")
			if err := os.WriteFile(src, tt.in, 0o644); err != nil {
				t.Fatal(err)
			}
			dst := filepath.Join(t.TempDir(), "Image")
			err := writeKernel(t.Context(), "arm64", src, dst)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("writeKernel error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("writeKernel: %v", err)
			}
			if got, _ := os.ReadFile(dst); !bytes.Equal(got, image) {
				t.Error("written Image differs")
			}
		})
	}
}

func TestWriteKernelRefusesWrongPayload(t *testing.T) {
	src := filepath.Join(t.TempDir(), "vmlinuz")
	// A bzImage whose xz payload is not a PVH ELF.
	if err := os.WriteFile(src, fakeBzImage(xzCompress(t, make([]byte, 0x300)), true), 0o644); err != nil {
		t.Fatal(err)
	}
	err := writeKernel(t.Context(), "amd64", src, filepath.Join(t.TempDir(), "vmlinux"))
	if err == nil || !strings.Contains(err.Error(), "unknown format") {
		t.Fatalf("writeKernel error %v, want a format error", err)
	}
}

func TestModuleEntriesDecompress(t *testing.T) {
	plain := "\x7fELF module"
	modDir := t.TempDir()
	writeFixture(t, modDir, "kernel/a.ko.xz", string(xzCompress(t, []byte(plain))))
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(plain))
	zw.Close()
	writeFixture(t, modDir, "kernel/b.ko.gz", gz.String())
	idx, err := parseModulesDep(strings.NewReader("kernel/a.ko.xz:\nkernel/b.ko.gz: kernel/a.ko.xz\n"))
	if err != nil {
		t.Fatal(err)
	}
	entries, err := moduleEntries(t.Context(), modDir, "6.1", t.TempDir(), idx, []string{"a", "b"})
	if err != nil {
		t.Fatalf("moduleEntries: %v", err)
	}
	for _, e := range entries[:2] {
		if !strings.HasSuffix(e.Name, ".ko") {
			t.Errorf("%s keeps its compression suffix", e.Name)
		}
		if got, _ := os.ReadFile(e.Source); string(got) != plain {
			t.Errorf("%s not decompressed: %q", e.Name, got)
		}
	}
	if want := "/lib/modules/6.1/kernel/a.ko\n/lib/modules/6.1/kernel/b.ko\n"; string(entries[2].Data) != want {
		t.Errorf("load list %q, want %q", entries[2].Data, want)
	}
}

// TestKernelHZ reads the timer rate from a kernel's build config, and
// refuses a config without one or with a value no kernel has.
func TestKernelHZ(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	debian := write("config-debian", "# CONFIG_HZ_100 is not set\nCONFIG_HZ_250=y\n# CONFIG_HZ_1000 is not set\nCONFIG_HZ=250\nCONFIG_SCHED_HRTICK=y\n")
	if hz, err := kernelHZ(debian); hz != 250 || err != nil {
		t.Errorf("Debian's config: %d, %v", hz, err)
	}
	for name, body := range map[string]string{
		"none":       "CONFIG_HZ_250=y\n",
		"zero":       "CONFIG_HZ=0\n",
		"absurd":     "CONFIG_HZ=1000000\n",
		"not a rate": "CONFIG_HZ=fast\n",
	} {
		if hz, err := kernelHZ(write("config-"+name, body)); hz != 0 || err == nil {
			t.Errorf("%s: %d, %v", name, hz, err)
		}
	}
	if _, err := kernelHZ(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing config: no error")
	}
}
