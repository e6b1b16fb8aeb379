package sandbox

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/guest/api"
	"github.com/airlock-sandbox/airlock/images/vhd"
	"github.com/airlock-sandbox/airlock/vm"
	"github.com/airlock-sandbox/airlock/vm/vmtest"
)

func TestDataDisk(t *testing.T) {
	state := t.TempDir()
	a, b := DataDiskPath(state, "/home/u/a"), DataDiskPath(state, "/home/u/b")
	if a == b || filepath.Dir(filepath.Dir(filepath.Dir(a))) != state || DataDiskPath(state, "/home/u/a") != a {
		t.Fatalf("paths %s, %s", a, b)
	}
	if err := EnsureDataDisk(a, 1<<20); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(a)
	if err != nil {
		t.Fatal(err)
	}
	head := make([]byte, len(api.BlankDiskMagic))
	f.Read(head)
	fi, _ := f.Stat()
	size, err := vhd.ReadFooter(f, fi.Size())
	f.Close()
	if !bytes.Equal(head, []byte(api.BlankDiskMagic)) || err != nil || size != 1<<20 {
		t.Fatalf("new disk: head %q, footer size %d, %v", head, size, err)
	}
	// An existing disk (the guest formatted it) is kept as it is.
	os.WriteFile(a, []byte("formatted"), 0o600)
	if err := EnsureDataDisk(a, 1<<20); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(a); string(got) != "formatted" {
		t.Fatalf("EnsureDataDisk replaced an existing disk: %q", got)
	}
	if err := ResetDataDisk(a); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(a); !os.IsNotExist(err) {
		t.Fatalf("after reset: %v", err)
	}
	if err := ResetDataDisk(a); err != nil {
		t.Fatalf("resetting a missing disk: %v", err)
	}
}

func TestStartAttachesDisks(t *testing.T) {
	img := Image{Kernel: "k", Initrd: "i", Name: "standard", RootDisk: "/img/root.vhd", RootLabel: api.RootLabel}
	state := t.TempDir()
	for _, keep := range []bool{false, true} {
		var cfg vmConfigSeen
		o := Options{Image: img, Workspace: "/w", RunDir: t.TempDir()}
		if keep {
			o.DiskDir = state
		}
		cfg.start(t, o)
		want := 1
		if keep {
			want = 2
		}
		if len(cfg.Disks) != want || cfg.Disks[0].Path != img.RootDisk || !cfg.Disks[0].ReadOnly {
			t.Fatalf("keep %t: disks %+v", keep, cfg.Disks)
		}
		boot, err := api.ParseCmdline(stringsJoin(cfg.Cmdline))
		if err != nil || boot.Root != api.RootLabel || boot.RootKeep != keep {
			t.Fatalf("keep %t: command line %v: %+v %v", keep, cfg.Cmdline, boot, err)
		}
		if keep && (cfg.Disks[1].Path != DataDiskPath(state, "/w") || cfg.Disks[1].ReadOnly) {
			t.Fatalf("data disk %+v", cfg.Disks[1])
		}
	}
	// A persistent disk needs a root disk to sit on.
	if _, err := Start(t.Context(), Options{Image: Image{Kernel: "k", Initrd: "i", Name: "minimal"}, DiskDir: state, RunDir: t.TempDir()}); err == nil {
		t.Fatal("a persistent disk was accepted for the minimal image")
	}
}

// vmConfigSeen is the machine configuration a sandbox asked for.
type vmConfigSeen struct{ vm.Config }

// start boots a sandbox on a fake machine with a fake agent, records the
// configuration, and closes it again.
func (c *vmConfigSeen) start(t *testing.T, o Options) {
	t.Helper()
	a := &fakeAgent{off: make(chan struct{})}
	o.NewMachine = func(cfg vm.Config) (vm.Machine, error) {
		c.Config = cfg
		return vmtest.New(cfg, goodGuest(a)), nil
	}
	sb, err := Start(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	sb.Close(t.Context())
}

func stringsJoin(words []string) string { return strings.Join(words, " ") }

// TestDataDiskInUse: while one VM runs on a workspace's persistent disk, a
// second VM on it and a reset are refused with ErrDataDiskInUse, and
// nothing is deleted; once it has stopped, both work.
func TestDataDiskInUse(t *testing.T) {
	img := Image{Kernel: "k", Initrd: "i", Name: "standard", RootDisk: "/img/root.vhd", RootLabel: api.RootLabel}
	state := t.TempDir()
	o := Options{Image: img, Workspace: "/w", DiskDir: state}
	start := func() (*Sandbox, error) {
		o := o
		o.RunDir = t.TempDir()
		a := &fakeAgent{off: make(chan struct{})}
		o.NewMachine = func(cfg vm.Config) (vm.Machine, error) { return vmtest.New(cfg, goodGuest(a)), nil }
		return Start(t.Context(), o)
	}
	first, err := start()
	if err != nil {
		t.Fatal(err)
	}
	disk := DataDiskPath(state, "/w")
	if _, err := start(); !errors.Is(err, ErrDataDiskInUse) {
		t.Fatalf("a second VM on the same persistent disk: %v, want ErrDataDiskInUse", err)
	}
	if err := ResetDataDisk(disk); !errors.Is(err, ErrDataDiskInUse) {
		t.Fatalf("reset under a running VM: %v, want ErrDataDiskInUse", err)
	}
	if _, err := os.Stat(disk); err != nil {
		t.Fatalf("the refused reset touched the disk: %v", err)
	}
	if err := first.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := ResetDataDisk(disk); err != nil {
		t.Fatalf("reset after the VM stopped: %v", err)
	}
	second, err := start()
	if err != nil {
		t.Fatalf("a VM after the first stopped: %v", err)
	}
	second.Close(t.Context())
}

// TestStartToolConfigWritable: the guest is told to leave the tool
// configuration writable only for a workspace the user listed.
func TestStartToolConfigWritable(t *testing.T) {
	img := Image{Kernel: "k", Initrd: "i", Name: "minimal"}
	for _, c := range []struct {
		ws, listed string
		want       bool
	}{{"/w", "/w", true}, {"/w", "/other", false}, {"", "", false}} {
		var cfg vmConfigSeen
		cfg.start(t, Options{Image: img, Workspace: c.ws, ToolConfigWritable: []string{c.listed}, RunDir: t.TempDir()})
		boot, err := api.ParseCmdline(stringsJoin(cfg.Cmdline))
		if err != nil || boot.ToolConfigWritable != c.want {
			t.Errorf("workspace %q, listed %q: command line %v: %+v %v", c.ws, c.listed, cfg.Cmdline, boot, err)
		}
	}
}
