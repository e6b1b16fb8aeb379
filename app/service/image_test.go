//go:build linux

package service

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/app/sandbox"
	"github.com/airlock-sandbox/airlock/app/session"
	"github.com/airlock-sandbox/airlock/app/settings"
	"github.com/airlock-sandbox/airlock/vm"
	"github.com/airlock-sandbox/airlock/vm/vmtest"
)

// TestSetImage: the image choice is validated, kept in the settings, and
// the next VM boots it with its root disk (and, asked for, the
// workspace's persistent disk); ResetDisk deletes that disk.
func TestSetImage(t *testing.T) {
	w := newWorld(t)
	w.service.Close(context.Background())
	std := sandbox.Image{Kernel: "k", Initrd: "i", Name: "standard", RootDisk: "/img/standard/root.vhd", RootLabel: "airlock-root"}
	var mu sync.Mutex
	var disks [][]vm.Disk
	state := filepath.Join(w.dir, "state")
	s, err := Open(Config{
		StateDir: state, SettingsPath: filepath.Join(w.dir, "settings.json"),
		Image: sandbox.Image{Kernel: "k", Initrd: "i", Name: "minimal"},
		FindImage: func(name string) (sandbox.Image, error) {
			if name != "standard" {
				t.Errorf("FindImage(%q)", name)
			}
			return std, nil
		},
		Start: func(ctx context.Context, o sandbox.Options) (session.Sandbox, error) {
			o.NewMachine = func(cfg vm.Config) (vm.Machine, error) {
				mu.Lock()
				disks = append(disks, cfg.Disks)
				mu.Unlock()
				return vmtest.New(cfg, w.boot), nil
			}
			return sandbox.Start(ctx, o)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	for _, bad := range []struct {
		name string
		keep bool
	}{{"fedora", false}, {"minimal", true}} {
		if err := s.SetImage(ctx, bad.name, bad.keep); !errors.Is(err, ErrBadImage) {
			t.Errorf("SetImage(%q, %t) = %v, want ErrBadImage", bad.name, bad.keep, err)
		}
	}
	if err := s.StartVM(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.SetImage(ctx, "standard", true); err != nil {
		t.Fatal(err)
	}
	st, _ := s.Status(ctx)
	if st.Session.Image != "standard" || !st.Session.KeepDisk || st.Settings.Image != "standard" || !st.Settings.KeepDisk {
		t.Fatalf("status after SetImage: session %+v, settings %+v", st.Session, st.Settings)
	}
	saved, err := settings.Load(filepath.Join(w.dir, "settings.json"), settings.Validators{})
	if err != nil || saved.Image != "standard" || !saved.KeepDisk {
		t.Fatalf("saved settings %+v, %v", saved, err)
	}
	data := sandbox.DataDiskPath(state, "")
	mu.Lock()
	last := disks[len(disks)-1]
	mu.Unlock()
	if len(disks) != 2 || len(last) != 2 || last[0].Path != std.RootDisk || !last[0].ReadOnly || last[1].Path != data || last[1].ReadOnly {
		t.Fatalf("boots' disks %+v, want the minimal image without disks, then the root disk and %s", disks, data)
	}
	// Play the guest formatting it, so a reset shows.
	f, err := os.OpenFile(data, os.O_WRONLY, 0)
	if err != nil {
		t.Fatalf("the persistent disk was not created: %v", err)
	}
	f.WriteAt([]byte("FORMATTED"), 0)
	f.Close()
	if err := s.ResetDisk(ctx); err != nil {
		t.Fatal(err)
	}
	// The VM booted again after the reset, on a new blank disk.
	mu.Lock()
	n := len(disks)
	mu.Unlock()
	if n != 3 {
		t.Fatalf("%d boots, want a third after the reset", n)
	}
	b := make([]byte, 8)
	if f, err = os.Open(data); err != nil {
		t.Fatal(err)
	}
	f.Read(b)
	f.Close()
	if string(b) != "AIRLOCK-" {
		t.Fatalf("the disk after a reset starts %q, want a blank disk", b)
	}
}

// TestSetMachine: a size outside the host's limits is refused and changes
// nothing; one inside is saved and applies from the VM's next start, a
// running VM keeping its size until then.
func TestSetMachine(t *testing.T) {
	w := newWorld(t)
	s := w.service
	s.limits = limitsFor(2, 4096)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.StartVM(ctx); err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][2]int{{3, 1024}, {1, 128}, {1, 4096}} {
		if err := s.SetMachine(ctx, bad[0], bad[1]); !errors.Is(err, ErrBadSize) {
			t.Errorf("SetMachine(%d, %d) = %v, want ErrBadSize", bad[0], bad[1], err)
		}
	}
	if st, _ := s.Settings(ctx); st.CPUs != settings.DefaultCPUs || st.MemoryMiB != settings.DefaultMemoryMiB {
		t.Fatalf("a refused size changed the settings: %d CPUs, %d MiB", st.CPUs, st.MemoryMiB)
	}
	if err := s.SetMachine(ctx, 1, 768); err != nil {
		t.Fatal(err)
	}
	st, _ := s.Status(ctx)
	if st.Settings.CPUs != 1 || st.Settings.MemoryMiB != 768 || st.Session.CPUs != settings.DefaultCPUs || st.Session.Generation != 1 {
		t.Fatalf("after SetMachine: settings %d/%d, running VM %d CPUs, generation %d", st.Settings.CPUs, st.Settings.MemoryMiB, st.Session.CPUs, st.Session.Generation)
	}
	if st.Limits.MaxCPUs != 2 || st.Limits.MaxMemoryMiB != 3072 {
		t.Errorf("status limits %+v", st.Limits)
	}
	saved, err := settings.Load(filepath.Join(w.dir, "settings.json"), settings.Validators{})
	if err != nil || saved.CPUs != 1 || saved.MemoryMiB != 768 {
		t.Fatalf("saved settings %+v, %v", saved, err)
	}
	if err := s.RestartVM(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _ := s.Status(ctx); st.Session.CPUs != 1 || st.Session.MemoryMiB != 768 {
		t.Fatalf("after a restart the VM has %d CPUs, %d MiB; want 1, 768", st.Session.CPUs, st.Session.MemoryMiB)
	}
}
