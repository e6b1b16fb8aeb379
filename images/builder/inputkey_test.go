package builder

import (
	"testing"

	"github.com/airlock-sandbox/airlock/images/manifest"
)

func fixtureInputs() keyInputs {
	return keyInputs{
		Arch: "amd64",
		Packages: []manifest.Package{
			{Name: "linux-image-6.1.0-9-amd64", Version: "6.1.27-1", Arch: "amd64", SHA256: "aa"},
			{Name: "busybox-static", Version: "1:1.35.0-4", Arch: "amd64", SHA256: "bb"},
		},
		GuestSHA:  "cc",
		Modules:   []Module{{Name: "virtio_pci"}, {Name: "hv_sock", Optional: true}},
		BaseFiles: []cpioEntry{dirEntry("tmp", 0o1777), fileEntry("etc/hostname", 0o644, []byte("airlock\n"))},
	}
}

// goldenKey pins the key of fixtureInputs. If it changes, every existing
// image is rebuilt on the next run: change it only together with Version.
const goldenKey = "dbc41f86b1a573e2e739ccfb6a4fc96cba93392adaf3f46828b55aa145c2c1e4"

func TestInputKeyStable(t *testing.T) {
	if got := inputKey(fixtureInputs()); got != goldenKey {
		t.Errorf("inputKey = %s, want %s (did the key's format change without a Version bump?)", got, goldenKey)
	}
	if inputKey(fixtureInputs()) != inputKey(fixtureInputs()) {
		t.Error("inputKey is not a function of its inputs")
	}
	if a, b := inputKey(keyInputs{Arch: "amd64", BaseFiles: baseEntries()}), inputKey(keyInputs{Arch: "amd64", BaseFiles: baseEntries()}); a != b {
		t.Error("baseEntries changes from call to call")
	}
}

func TestInputKeyChanges(t *testing.T) {
	base := inputKey(fixtureInputs())
	tests := []struct {
		name   string
		change func(*keyInputs)
	}{
		{"arch", func(in *keyInputs) { in.Arch = "arm64" }},
		{"package version", func(in *keyInputs) { in.Packages[0].Version = "6.1.27-2" }},
		{"package hash", func(in *keyInputs) { in.Packages[1].SHA256 = "bc" }},
		{"guest agent", func(in *keyInputs) { in.GuestSHA = "cd" }},
		{"module added", func(in *keyInputs) { in.Modules = append(in.Modules, Module{Name: "ext4"}) }},
		{"module made optional", func(in *keyInputs) { in.Modules[0].Optional = true }},
		{"file content", func(in *keyInputs) { in.BaseFiles[1].Data = []byte("other\n") }},
		{"file mode", func(in *keyInputs) { in.BaseFiles[0].Mode = modeDir | 0o755 }},
		{"file owner", func(in *keyInputs) { in.BaseFiles[0].UID = 1000 }},
		{"source kernel", func(in *keyInputs) { in.SourceKernel = "dd" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := fixtureInputs()
			tt.change(&in)
			if inputKey(in) == base {
				t.Errorf("changing the %s leaves the input key unchanged", tt.name)
			}
		})
	}
}
