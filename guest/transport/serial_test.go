package transport

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestFindSerialPort(t *testing.T) {
	tests := []struct {
		name  string
		ports map[string]string // port dir -> name file content ("" = no file)
		want  string
		err   error
	}{
		{"found", map[string]string{"vport0p0": "", "vport0p1": "org.qemu.guest_agent.0\n", "vport1p1": "airlock.mux\n"}, "vport1p1", nil},
		{"first of several", map[string]string{"vport2p1": "airlock.mux\n", "vport1p3": "airlock.mux\n"}, "vport1p3", nil},
		{"missing", map[string]string{"vport0p1": "other\n"}, "", ErrNoSerialPort},
		{"no class dir", nil, "", ErrNoSerialPort},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			if tt.ports != nil {
				for port, name := range tt.ports {
					dir := filepath.Join(root, "class", "virtio-ports", port)
					if err := os.MkdirAll(dir, 0o755); err != nil {
						t.Fatal(err)
					}
					if name != "" {
						if err := os.WriteFile(filepath.Join(dir, "name"), []byte(name), 0o644); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
			got, err := FindSerialPort(root, "airlock.mux")
			if !errors.Is(err, tt.err) || got != tt.want {
				t.Fatalf("FindSerialPort = %q, %v; want %q, %v", got, err, tt.want, tt.err)
			}
		})
	}
}
