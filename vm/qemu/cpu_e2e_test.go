//go:build e2e

package qemu

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/guest/api"
)

// TestE2ECPUModelBootTime compares TCG boot times of CPU models; it takes
// about 20 s, so it runs only with AIRLOCK_E2E_MEASURE=1.
func TestE2ECPUModelBootTime(t *testing.T) {
	if os.Getenv("AIRLOCK_E2E_MEASURE") == "" {
		t.Skip("set AIRLOCK_E2E_MEASURE=1")
	}
	img := imagesDir(t, false)
	for round := range 3 {
		for _, cpu := range []string{"max", "qemu64", "qemu64,+arat"} {
			cfg := e2eConfig(t)
			cfg.Kernel, cfg.Initrd = filepath.Join(img, "vmlinux"), filepath.Join(img, "initramfs.cpio")
			cfg.MemoryMiB = 512
			m, err := New(cfg, Options{Accel: AccelTCG})
			if err != nil {
				t.Fatal(err)
			}
			m.cpuModel = cpu
			ln, _ := m.Listen(api.PortReady)
			start := time.Now()
			if err := m.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			c, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			r, _ := api.ReadReady(c)
			t.Logf("round %d cpu %-7s ready after %v (guest uptime %d ms)", round, cpu, time.Since(start).Round(time.Millisecond), r.BootMillis)
			m.Stop(context.Background())
		}
	}
}
