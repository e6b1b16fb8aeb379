package boot

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/airlock-sandbox/airlock/guest/api"
)

// TestFormatLayer: a blank layer disk, once formatted, probes as the layer
// (the blank mark is gone), so the next boot mounts it rather than
// formatting it again.
func TestFormatLayer(t *testing.T) {
	if _, err := os.Stat("/bin/busybox"); err != nil {
		if _, err := os.Stat("/sbin/mke2fs"); err != nil {
			t.Skip("no busybox or mke2fs here")
		}
	}
	disk := filepath.Join(t.TempDir(), "layer.img")
	if err := os.WriteFile(disk, []byte(api.BlankLayerMagic), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(disk, 64<<20); err != nil {
		t.Fatal(err)
	}
	if kind, _ := probeDevice(disk); kind != diskBlankLayer {
		t.Fatalf("blank disk probes as %d", kind)
	}
	if err := formatLayer(disk); err != nil {
		t.Fatal(err)
	}
	if kind, label := probeDevice(disk); kind != diskExt || label != api.LayerLabel {
		t.Fatalf("formatted disk probes as %d %q, want the layer", kind, label)
	}
}
