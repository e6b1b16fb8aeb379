package builder

import (
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
)

func loadFixtureIndex(t *testing.T) (*moduleIndex, map[string]bool) {
	t.Helper()
	dep, err := os.Open("testdata/modules.dep")
	if err != nil {
		t.Fatal(err)
	}
	defer dep.Close()
	idx, err := parseModulesDep(dep)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.Open("testdata/modules.builtin")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	builtin, err := parseBuiltin(b)
	if err != nil {
		t.Fatal(err)
	}
	return idx, builtin
}

func TestModuleName(t *testing.T) {
	tests := map[string]string{
		"kernel/fs/ext4/ext4.ko":                         "ext4",
		"kernel/drivers/char/hw_random/virtio-rng.ko":    "virtio_rng",
		"kernel/drivers/char/hw_random/virtio-rng.ko.xz": "virtio_rng",
		"kernel/net/9p/9pnet_fd.ko.zst":                  "9pnet_fd",
		"virtio_pci":                                     "virtio_pci",
	}
	for in, want := range tests {
		if got := moduleName(in); got != want {
			t.Errorf("moduleName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestLoadOrder(t *testing.T) {
	idx, builtin := loadFixtureIndex(t)
	tests := []struct {
		name        string
		want        []Module
		wantOrder   []string
		wantSkipped []string
		wantErr     string
	}{
		{
			name:      "dependencies first, each once",
			want:      []Module{{Name: "virtio_pci"}, {Name: "virtiofs"}},
			wantOrder: []string{"virtio_pci_legacy_dev", "virtio_pci_modern_dev", "virtio_ring", "virtio", "virtio_pci", "fuse", "virtiofs"},
		},
		{
			name:      "transitive list in modules.dep order",
			want:      []Module{{Name: "ext4"}},
			wantOrder: []string{"crc16", "mbcache", "jbd2", "ext4"},
		},
		{
			name:      "built-in modules are skipped silently",
			want:      []Module{{Name: "virtio_mmio"}, {Name: "virtio_blk"}, {Name: "overlay"}},
			wantOrder: []string{"overlay"},
		},
		{
			name:        "missing optional module is reported as skipped",
			want:        []Module{{Name: "hv_sock", Optional: true}, {Name: "overlay"}},
			wantOrder:   []string{"overlay"},
			wantSkipped: []string{"hv_sock"},
		},
		{
			name:      "compressed module, dashed file name",
			want:      []Module{{Name: "virtio_rng", Optional: true}},
			wantOrder: []string{"virtio_ring", "virtio", "virtio_rng"},
		},
		{
			name:    "missing required module",
			want:    []Module{{Name: "overlay"}, {Name: "9pnet_fd"}},
			wantErr: "9pnet_fd is neither a loadable module",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			order, skipped, err := loadOrder(idx, builtin, tt.want)
			if tt.wantErr != "" {
				if !errors.Is(err, errModuleMissing) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("loadOrder error %v, want errModuleMissing containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("loadOrder: %v", err)
			}
			if !reflect.DeepEqual(order, tt.wantOrder) {
				t.Errorf("order = %v, want %v", order, tt.wantOrder)
			}
			if !reflect.DeepEqual(skipped, tt.wantSkipped) {
				t.Errorf("skipped = %v, want %v", skipped, tt.wantSkipped)
			}
		})
	}
}

func TestLoadOrderGuards(t *testing.T) {
	tests := []struct {
		name, dep, wantErr string
	}{
		{"cycle", "a.ko: b.ko\nb.ko: c.ko\nc.ko: a.ko\n", "dependency cycle: a -> b -> c -> a"},
		{"self cycle", "a.ko: a.ko\n", "dependency cycle: a -> a"},
		{"dependency not in modules.dep", "a.ko: b.ko\n", "b (needed by a) is not in modules.dep"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			idx, err := parseModulesDep(strings.NewReader(tt.dep))
			if err != nil {
				t.Fatal(err)
			}
			_, _, err = loadOrder(idx, nil, []Module{{Name: "a"}})
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("loadOrder error %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func TestParseModulesDepRejectsGarbage(t *testing.T) {
	if _, err := parseModulesDep(strings.NewReader("kernel/a.ko: b.ko\nno colon here\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("parseModulesDep error %v, want one naming line 2", err)
	}
}

func TestModuleEntries(t *testing.T) {
	idx, builtin := loadFixtureIndex(t)
	order, _, err := loadOrder(idx, builtin, []Module{{Name: "ext4"}})
	if err != nil {
		t.Fatal(err)
	}
	modDir := t.TempDir()
	for _, name := range order {
		writeFixture(t, modDir, idx.path[name], name)
	}
	entries, err := moduleEntries(t.Context(), modDir, "6.1.0-9-amd64", t.TempDir(), idx, order)
	if err != nil {
		t.Fatalf("moduleEntries: %v", err)
	}
	last := entries[len(entries)-1]
	if last.Name != loadListPath {
		t.Fatalf("last entry is %s, want the load list", last.Name)
	}
	wantList := strings.Join([]string{
		"/lib/modules/6.1.0-9-amd64/kernel/lib/crc16.ko",
		"/lib/modules/6.1.0-9-amd64/kernel/fs/mbcache.ko",
		"/lib/modules/6.1.0-9-amd64/kernel/fs/jbd2/jbd2.ko",
		"/lib/modules/6.1.0-9-amd64/kernel/fs/ext4/ext4.ko",
	}, "\n") + "\n"
	if string(last.Data) != wantList {
		t.Errorf("load list:\n%s\nwant:\n%s", last.Data, wantList)
	}
	for i, e := range entries[:len(entries)-1] {
		if "/"+e.Name != strings.Split(wantList, "\n")[i] {
			t.Errorf("entry %d is %s, the load list says %s", i, e.Name, strings.Split(wantList, "\n")[i])
		}
	}
}
