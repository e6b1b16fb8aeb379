package sandbox

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlock-sandbox/airlock/guest/api"
	"github.com/airlock-sandbox/airlock/images/vhd"
	"github.com/airlock-sandbox/airlock/vm"
	"github.com/airlock-sandbox/airlock/vm/vmtest"
)

func TestLayerDisk(t *testing.T) {
	state := t.TempDir()
	a := LayerDiskPath(state, "/home/u/a")
	if a == LayerDiskPath(state, "/home/u/b") || filepath.Base(a) != "layer.vhd" ||
		filepath.Dir(filepath.Dir(a)) != filepath.Join(state, "changes") ||
		filepath.Base(filepath.Dir(a)) != filepath.Base(filepath.Dir(DataDiskPath(state, "/home/u/a"))) {
		t.Fatalf("path %s (data disk %s)", a, DataDiskPath(state, "/home/u/a"))
	}
	if err := EnsureLayerDisk(a, 64<<20); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(a)
	if err != nil {
		t.Fatal(err)
	}
	head := make([]byte, len(api.BlankLayerMagic))
	f.Read(head)
	fi, _ := f.Stat()
	size, err := vhd.ReadFooter(f, fi.Size())
	f.Close()
	if !bytes.Equal(head, []byte(api.BlankLayerMagic)) || err != nil || size != 64<<20 {
		t.Fatalf("new disk: head %q, footer size %d, %v", head, size, err)
	}
	l, err := LockLayerDisk(a)
	if err != nil {
		t.Fatal(err)
	}
	if err := ResetLayerDisk(a); !errors.Is(err, ErrLayerDiskInUse) {
		t.Fatalf("reset under a lock: %v", err)
	}
	l.Unlock()
	if err := ResetLayerDisk(a); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(a); !os.IsNotExist(err) {
		t.Fatalf("after reset: %v", err)
	}
}

// TestStartChanges: a sandbox holding changes shares the folder read-only
// at the hypervisor, attaches the layer disk writable, tells the guest,
// and keeps a second VM off the same layer while it runs.
func TestStartChanges(t *testing.T) {
	img := Image{Kernel: "k", Initrd: "i", Name: "minimal"}
	disk := LayerDiskPath(t.TempDir(), "/w")
	var cfg vmConfigSeen
	cfg.start(t, Options{Image: img, Workspace: "/w", Changes: true, LayerDisk: disk, LayerDiskSize: 1 << 20, RunDir: t.TempDir()})
	if cfg.Share == nil || !cfg.Share.ReadOnly {
		t.Fatalf("share %+v, want read-only", cfg.Share)
	}
	if len(cfg.Disks) != 1 || cfg.Disks[0].Path != disk || cfg.Disks[0].ReadOnly || cfg.Disks[0].Format != vm.DiskRawVHD {
		t.Fatalf("disks %+v", cfg.Disks)
	}
	boot, err := api.ParseCmdline(stringsJoin(cfg.Cmdline) + " airlock.share=9p airlock.share_ro=1")
	if err != nil || !boot.Changes {
		t.Fatalf("command line %v: %+v %v", cfg.Cmdline, boot, err)
	}
	if fi, err := os.Stat(disk); err != nil || fi.Size() != 1<<20+512 {
		t.Fatalf("layer disk: %v %v", fi, err)
	}

	// Without changes: a writable share and no disk.
	cfg = vmConfigSeen{}
	cfg.start(t, Options{Image: img, Workspace: "/w", RunDir: t.TempDir()})
	if cfg.Share.ReadOnly || len(cfg.Disks) != 0 {
		t.Fatalf("direct: share %+v, disks %+v", cfg.Share, cfg.Disks)
	}

	for name, o := range map[string]Options{
		"read-only too":  {Workspace: "/w", ReadOnly: true, LayerDisk: disk},
		"no workspace":   {LayerDisk: disk},
		"no layer disk":  {Workspace: "/w"},
		"relative layer": {Workspace: "/w", LayerDisk: "layer.img"},
	} {
		o.Image, o.Changes, o.RunDir = img, true, t.TempDir()
		o.NewMachine = func(vm.Config) (vm.Machine, error) { t.Fatal("a machine was made"); return nil, nil }
		if _, err := Start(t.Context(), o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}

	a := &fakeAgent{off: make(chan struct{})}
	o := Options{Image: img, Workspace: "/w", Changes: true, LayerDisk: disk, RunDir: t.TempDir(),
		NewMachine: func(cfg vm.Config) (vm.Machine, error) { return vmtest.New(cfg, goodGuest(a)), nil }}
	first, err := Start(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	o.RunDir = t.TempDir()
	if _, err := Start(t.Context(), o); !errors.Is(err, ErrLayerDiskInUse) {
		t.Fatalf("a second VM on the same layer: %v", err)
	}
	if err := ResetLayerDisk(disk); !errors.Is(err, ErrLayerDiskInUse) {
		t.Fatalf("reset under a running VM: %v", err)
	}
	if first.layerLock == nil {
		t.Fatal("no lock held")
	}
	first.Close(t.Context())
	if err := ResetLayerDisk(disk); err != nil {
		t.Fatalf("reset after the VM stopped: %v", err)
	}
}
