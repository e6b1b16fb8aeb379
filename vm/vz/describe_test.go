package vz

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/guest/api"
	"github.com/airlock-sandbox/airlock/vm"
)

// UPDATE_GOLDEN=1 go test ./vm/vz rewrites testdata/*.json.
var update = os.Getenv("UPDATE_GOLDEN") != ""

func baseConfig() vm.Config {
	return vm.Config{
		Kernel: "/img/arm64/Image", Initrd: "/img/arm64/initramfs.cpio",
		Cmdline: []string{"airlock.uid=501", "airlock.gid=20"},
		CPUs:    2, MemoryMiB: 1024,
		Dir: "/run/m", ConsoleLog: "/var/log/airlock/console.log",
	}
}

func TestDescribeGolden(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*vm.Config)
	}{
		{"no-share", func(*vm.Config) {}},
		{"share", func(c *vm.Config) { c.Share = &vm.Share{HostPath: "/Users/me/project"} }},
		{"share-ro", func(c *vm.Config) { c.Share = &vm.Share{HostPath: "/Users/me/project", ReadOnly: true} }},
		{"standard-disks", func(c *vm.Config) {
			c.Cmdline = append(c.Cmdline, "airlock.root=airlock-root", "airlock.root_keep=1")
			c.Disks = []vm.Disk{
				{Path: "/Applications/Airlock.app/Contents/Resources/images/standard/arm64/root.vhd", ReadOnly: true, Format: vm.DiskRawVHD},
				{Path: "/Users/me/Library/Application Support/Airlock/disks/0123/data.vhd", Format: vm.DiskRawVHD},
			}
		}},
		// Changes held (api.BootConfig.Changes): the folder read-only at
		// the framework, the layer disk writable.
		{"changes-layer", func(c *vm.Config) {
			c.Share = &vm.Share{HostPath: "/Users/me/project", ReadOnly: true}
			c.Cmdline = append(c.Cmdline, "airlock.changes=1")
			c.Disks = []vm.Disk{{Path: "/Users/me/Library/Application Support/Airlock/changes/0123456789abcdef/layer.vhd", Format: vm.DiskRawVHD}}
		}},
		{"default-console-debug", func(c *vm.Config) {
			c.ConsoleLog = ""
			c.CPUs, c.MemoryMiB = 8, 4096
			c.Cmdline = append(c.Cmdline, "airlock.debug=1")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := baseConfig()
			tc.edit(&cfg)
			d, err := Describe(cfg, "arm64", appleSilicon)
			if err != nil {
				t.Fatal(err)
			}
			checkDescription(t, cfg, d)
			got, err := json.MarshalIndent(d, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			golden(t, tc.name+".json", append(got, '\n'))
		})
	}
}

// checkDescription holds for every description, golden or not.
func checkDescription(t *testing.T, cfg vm.Config, d Description) {
	t.Helper()
	if len(d.Network) != 0 {
		t.Errorf("network devices %v: the guest must have none", d.Network)
	}
	if !d.VirtioSocket || !d.Entropy || !d.Balloon || !d.Console.Append {
		t.Errorf("missing a device: %+v", d)
	}
	if len(d.Disks) != len(cfg.Disks) {
		t.Errorf("%d disks described, %d configured", len(d.Disks), len(cfg.Disks))
	}
	for i := range min(len(d.Disks), len(cfg.Disks)) {
		if d.Disks[i].Path != cfg.Disks[i].Path || d.Disks[i].ReadOnly != cfg.Disks[i].ReadOnly {
			t.Errorf("disk %d: described %+v, configured %+v", i, d.Disks[i], cfg.Disks[i])
		}
		// The framework's default caching corrupts ext4 on writable disks.
		if d.Disks[i].Caching != DiskCached || d.Disks[i].Sync != DiskFsync {
			t.Errorf("disk %d: caching %q sync %q, want cached and fsync", i, d.Disks[i].Caching, d.Disks[i].Sync)
		}
	}
	words := strings.Fields(d.Boot.Cmdline)
	if words[0] != "console=hvc0" {
		t.Errorf("command line starts with %q, want console=hvc0", words[0])
	}
	has := func(w string) bool {
		for _, x := range words {
			if x == w {
				return true
			}
		}
		return false
	}
	if !has("airlock.transport=vsock") {
		t.Errorf("command line %q lacks the vsock transport", d.Boot.Cmdline)
	}
	if got := has("airlock.share=virtiofs"); got != (cfg.Share != nil) {
		t.Errorf("command line %q: share word present %t, want %t", d.Boot.Cmdline, got, cfg.Share != nil)
	}
	ro := cfg.Share != nil && cfg.Share.ReadOnly
	if has("airlock.share_ro=1") != ro {
		t.Errorf("command line %q: read-only word present %t, want %t", d.Boot.Cmdline, !ro, ro)
	}
	if ro && !d.Share.ReadOnly {
		t.Error("read-only share not read-only on the device")
	}
	if cfg.Share != nil {
		// The guest must read back what the host meant.
		boot, err := api.ParseCmdline(d.Boot.Cmdline)
		if err != nil || boot.ShareReadOnly != cfg.Share.ReadOnly || boot.Changes != slices.Contains(cfg.Cmdline, "airlock.changes=1") {
			t.Errorf("guest reads %+v, %v from %q", boot, err, d.Boot.Cmdline)
		}
	}
	if !strings.HasSuffix(d.Boot.Cmdline, strings.Join(cfg.Cmdline, " ")) {
		t.Errorf("command line %q does not end with the caller's words %q", d.Boot.Cmdline, cfg.Cmdline)
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	p := filepath.Join("testdata", name)
	if update {
		if err := os.WriteFile(p, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("%v (UPDATE_GOLDEN=1 writes it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (UPDATE_GOLDEN=1 rewrites it)\ngot:\n%s\nwant:\n%s", p, got, want)
	}
}

func TestDescribeRefuses(t *testing.T) {
	for _, tc := range []struct {
		name     string
		arch     string
		edit     func(*vm.Config)
		want     string
		sentinel error
	}{
		{"no kernel", "arm64", func(c *vm.Config) { c.Kernel = "" }, "no kernel", vm.ErrInvalidConfig},
		{"relative kernel", "arm64", func(c *vm.Config) { c.Kernel = "Image" }, "kernel path \"Image\" is not absolute", vm.ErrInvalidConfig},
		{"relative share", "arm64", func(c *vm.Config) { c.Share = &vm.Share{HostPath: "proj"} }, "not an absolute path", vm.ErrInvalidConfig},
		{"too big", "arm64", func(c *vm.Config) { c.CPUs = 64 }, "64 CPUs requested, this Mac allows 1 to 8", vm.ErrInvalidConfig},
		{"spaces in a word", "arm64", func(c *vm.Config) { c.Cmdline = []string{"a b"} }, "white space", vm.ErrInvalidConfig},
		{"foreign arch", "riscv64", func(*vm.Config) {}, "architecture \"riscv64\"", vm.ErrInvalidConfig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := baseConfig()
			tc.edit(&cfg)
			_, err := Describe(cfg, tc.arch, appleSilicon)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, tc.sentinel) {
				t.Fatalf("Describe error = %v; want %v containing %q", err, tc.sentinel, tc.want)
			}
		})
	}
}
