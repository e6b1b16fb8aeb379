package boot

import (
	"encoding/binary"
	"testing"

	"github.com/airlock-sandbox/airlock/guest/api"
)

func TestProbeDisk(t *testing.T) {
	ext := func(label string) []byte {
		b := make([]byte, 4096)
		binary.LittleEndian.PutUint16(b[sbOffset+sbMagicOff:], ext4Magic)
		copy(b[sbOffset+sbLabelOff:], label)
		return b
	}
	full := ext("0123456789abcdef")
	for _, tc := range []struct {
		name  string
		head  []byte
		kind  diskKind
		label string
	}{
		{"root", ext(api.RootLabel), diskExt, api.RootLabel},
		{"label fills the field", full, diskExt, "0123456789abcdef"},
		{"no label", ext(""), diskExt, ""},
		{"blank persistent disk", append([]byte(api.BlankDiskMagic), make([]byte, 4000)...), diskBlank, ""},
		{"blank layer disk", append([]byte(api.BlankLayerMagic), make([]byte, 4000)...), diskBlankLayer, ""},
		{"layer", ext(api.LayerLabel), diskExt, api.LayerLabel},
		{"zeros", make([]byte, 4096), diskUnknown, ""},
		{"short read", ext(api.RootLabel)[:sbOffset+sbLabelOff+3], diskUnknown, ""},
		{"empty", nil, diskUnknown, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kind, label := probeDisk(tc.head)
			if kind != tc.kind || label != tc.label {
				t.Fatalf("probeDisk = %d %q, want %d %q", kind, label, tc.kind, tc.label)
			}
		})
	}
}
