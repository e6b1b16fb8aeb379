package qemu

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/airlock-sandbox/airlock/vm"
)

type fakeKVM struct {
	openErr, probeErr error
	probes            int
	k                 string
}

func (f *fakeKVM) open() error                { return f.openErr }
func (f *fakeKVM) key(string) (string, error) { return f.k, nil }
func (f *fakeKVM) probe(context.Context, string) error {
	f.probes++
	return f.probeErr
}

func TestChooseAccel(t *testing.T) {
	slow := errors.New("too slow")
	tests := []struct {
		name       string
		mode, arch string
		kvm        fakeKVM
		want       string
		err        bool
		probes     int
	}{
		{"tcg skips the probe", AccelTCG, "amd64", fakeKVM{}, AccelTCG, false, 0},
		{"auto, KVM works", AccelAuto, "amd64", fakeKVM{}, AccelKVM, false, 1},
		{"auto, KVM slow", AccelAuto, "amd64", fakeKVM{probeErr: slow}, AccelTCG, false, 1},
		{"auto, no /dev/kvm", AccelAuto, "amd64", fakeKVM{openErr: errors.New("EACCES")}, AccelTCG, false, 0},
		{"auto, foreign arch", AccelAuto, "arm64", fakeKVM{}, AccelTCG, false, 0},
		{"kvm, works", AccelKVM, "amd64", fakeKVM{}, AccelKVM, false, 1},
		{"kvm, slow", AccelKVM, "amd64", fakeKVM{probeErr: slow}, "", true, 1},
		{"kvm, no /dev/kvm", AccelKVM, "amd64", fakeKVM{openErr: errors.New("EACCES")}, "", true, 0},
		{"kvm, foreign arch", AccelKVM, "arm64", fakeKVM{}, "", true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := tt.kvm
			k.k = "6.1|/usr/bin/qemu|1"
			got, err := chooseAccel(context.Background(), tt.mode, tt.arch, "amd64", "/usr/bin/qemu", &k, accelCache{})
			if (err != nil) != tt.err || got != tt.want || k.probes != tt.probes {
				t.Fatalf("got %q, %v after %d probes", got, err, k.probes)
			}
			if err != nil && !errors.Is(err, vm.ErrNoHypervisor) {
				t.Errorf("error does not wrap ErrNoHypervisor: %v", err)
			}
		})
	}
}

func TestAccelCache(t *testing.T) {
	cache := accelCache{path: filepath.Join(t.TempDir(), "sub", "kvm-probe.json")}
	k := &fakeKVM{k: "kernel-a|qemu|1", probeErr: errors.New("too slow")}
	for range 3 {
		if got, _ := chooseAccel(context.Background(), AccelAuto, "amd64", "amd64", "q", k, cache); got != AccelTCG {
			t.Fatalf("got %s", got)
		}
	}
	if k.probes != 1 {
		t.Errorf("probed %d times, want once (cached)", k.probes)
	}
	// Forcing KVM reads the cached verdict and says where it came from.
	if _, err := chooseAccel(context.Background(), AccelKVM, "amd64", "amd64", "q", k, cache); err == nil || !bytes.Contains([]byte(err.Error()), []byte(cache.path)) {
		t.Errorf("forced kvm with a cached failure: %v", err)
	}
	// A new host kernel or QEMU binary means a new probe.
	k.k, k.probeErr = "kernel-b|qemu|1", nil
	if got, _ := chooseAccel(context.Background(), AccelAuto, "amd64", "amd64", "q", k, cache); got != AccelKVM || k.probes != 2 {
		t.Errorf("got %s after %d probes", got, k.probes)
	}
	if v, ok := cache.get("kernel-a|qemu|1"); !ok || v.OK {
		t.Errorf("old verdict lost: %+v %v", v, ok)
	}
}

func TestAccelCacheCorrupt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.json")
	writeFile(t, path, "{not json")
	c := accelCache{path: path}
	if _, ok := c.get("x"); ok {
		t.Fatal("corrupt cache gave a verdict")
	}
	if err := c.put("x", verdict{OK: true}); err != nil {
		t.Fatal(err)
	}
	if v, ok := c.get("x"); !ok || !v.OK {
		t.Fatal("verdict not stored over a corrupt cache")
	}
}

func TestProbeFirmware(t *testing.T) {
	img := probeFirmware()
	if len(img) != 64<<10 {
		t.Fatalf("size %d", len(img))
	}
	// The reset vector (last 16 bytes) far-jumps to f000:0000.
	if !bytes.Equal(img[len(img)-16:len(img)-11], []byte{0xea, 0x00, 0x00, 0xf0 - 0xf0, 0xf0}) {
		t.Errorf("reset vector % x", img[len(img)-16:])
	}
	// The code ends by writing the exit value to the debug-exit port.
	if !bytes.Contains(img, []byte{0xb0, probeExitValue, 0xe6, 0xf4}) {
		t.Error("no mov al,0x31; out 0xf4,al")
	}
	// The GDT sits where the code's lgdt operand (at 0xd8) says, and its
	// base is where the code copies it.
	if !bytes.Equal(img[0xd8:0xde], []byte{0x1f, 0x00, 0x00, 0x50, 0x00, 0x00}) {
		t.Errorf("gdtr % x", img[0xd8:0xde])
	}
	if !bytes.Equal(img[0xc0:0xc8], []byte{0xff, 0xff, 0, 0, 0, 0x9a, 0xcf, 0}) {
		t.Errorf("code32 descriptor % x", img[0xc0:0xc8])
	}
	if probeExitStatus != 99 {
		t.Errorf("exit status %d", probeExitStatus)
	}
	a := probeArgs("/tmp/fw")
	if !bytes.Contains([]byte(joinArgs(a)), []byte("-bios /tmp/fw -device isa-debug-exit,iobase=0xf4,iosize=4")) {
		t.Errorf("probe args %v", a)
	}
}
