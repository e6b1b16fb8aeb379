package qemu

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/guest/mux"
	"github.com/airlock-sandbox/airlock/vm"
)

// fakeQEMU writes a script standing in for QEMU and returns a config whose
// kernel and initrd exist.
func fakeQEMU(t *testing.T, script string) (vm.Config, Options) {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "qemu-system-x86_64")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	k, i := filepath.Join(dir, "vmlinux"), filepath.Join(dir, "initrd")
	os.WriteFile(k, []byte("k"), 0o644)
	os.WriteFile(i, []byte("i"), 0o644)
	run := filepath.Join(dir, "run")
	os.Mkdir(run, 0o700)
	return vm.Config{Kernel: k, Initrd: i, CPUs: 1, MemoryMiB: 256, Dir: run},
		// A shell script speaks no machine protocol: these guests boot
		// through, as with templates off (park_test.go fakes a QEMU that
		// parks).
		Options{Arch: "amd64", Accel: AccelTCG, QEMU: bin, CacheDir: filepath.Join(dir, "cache"), Templates: TemplatesOff}
}

func TestLifecycleStop(t *testing.T) {
	cfg, opts := fakeQEMU(t, `trap 'exit 0' TERM; while :; do sleep 0.05; done`)
	m, err := New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	states := m.Watch(ctx)
	if _, err := m.Dial(ctx, 1024); !errors.Is(err, vm.ErrNotRunning) {
		t.Errorf("Dial before Start: %v", err)
	}
	ln, err := m.Listen(1023) // before Start
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Listen(1023); !errors.Is(err, vm.ErrPortInUse) {
		t.Errorf("second Listen: %v", err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); !errors.Is(err, vm.ErrAlreadyStarted) {
		t.Errorf("second Start: %v", err)
	}
	info := m.Info()
	if info.Backend != "qemu" || info.Accelerator != "tcg" || info.Transport != "serial" || info.PID == 0 ||
		info.ConsoleLog != filepath.Join(cfg.Dir, "console.log") {
		t.Errorf("info %+v", info)
	}
	// Dial waits for the guest's hello, which a fake never sends.
	dctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = m.Dial(dctx, 1024)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Dial without a guest: %v", err)
	}
	if err := m.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Stop(ctx); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if err := m.Wait(ctx); err != nil {
		t.Errorf("Wait after Stop: %v", err)
	}
	if err := processGone(info.PID); err != nil {
		t.Error(err)
	}
	var seen []vm.State
	for s := range states {
		seen = append(seen, s)
	}
	if got := seen[len(seen)-1]; got != vm.StateStopped {
		t.Errorf("states %v", seen)
	}
	if _, err := ln.Accept(); !errors.Is(err, mux.ErrClosed) && !strings.Contains(err.Error(), "closed") {
		t.Errorf("Accept after Stop: %v", err)
	}
}

func TestLifecycleStopForces(t *testing.T) {
	cfg, opts := fakeQEMU(t, `trap '' TERM; while :; do sleep 0.05; done`)
	m, err := New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := m.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Stop took %v", d)
	}
	if s := m.State(); s != vm.StateStopped {
		t.Errorf("state %s", s)
	}
}

func TestLifecycleQEMUFails(t *testing.T) {
	cfg, opts := fakeQEMU(t, `echo "qemu-system-x86_64: -accel kvm: failed to initialize kvm: Permission denied" >&2; exit 1`)
	m, err := New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	err = m.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "Permission denied") || !strings.Contains(err.Error(), "exit status 1") {
		t.Fatalf("Start = %v", err)
	}
	if err := m.Wait(context.Background()); err == nil {
		t.Error("Wait = nil after a failure")
	}
	if s := m.State(); s != vm.StateFailed {
		t.Errorf("state %s", s)
	}
}

func TestLifecyclePowerOff(t *testing.T) {
	cfg, opts := fakeQEMU(t, `sleep 0.5; exit 0`)
	m, err := New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := m.Wait(context.Background()); err != nil {
		t.Errorf("Wait after power-off = %v", err)
	}
	if s := m.State(); s != vm.StateStopped {
		t.Errorf("state %s", s)
	}
}

func TestStopBeforeStart(t *testing.T) {
	cfg, opts := fakeQEMU(t, `exit 0`)
	m, err := New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := m.State(); s != vm.StateStopped {
		t.Errorf("state %s", s)
	}
	if err := m.Start(context.Background()); !errors.Is(err, vm.ErrAlreadyStarted) {
		t.Errorf("Start after Stop: %v", err)
	}
}

func TestNewInvalid(t *testing.T) {
	cfg, opts := fakeQEMU(t, `exit 0`)
	cfg.CPUs = 0
	if _, err := New(cfg, opts); !errors.Is(err, vm.ErrInvalidConfig) {
		t.Errorf("New = %v", err)
	}
	cfg, opts = fakeQEMU(t, `exit 0`)
	cfg.Share = &vm.Share{HostPath: "/x", ReadOnly: true}
	opts.Share = ShareVirtiofs
	if _, err := New(cfg, opts); !errors.Is(err, vm.ErrInvalidConfig) {
		t.Errorf("read-only virtiofs: %v", err)
	}
}

// processGone checks pid no longer runs (or is a zombie nobody waits for).
func processGone(pid int) error {
	b, err := os.ReadFile(filepath.Join("/proc", itoa(pid), "stat"))
	if err != nil {
		return nil
	}
	if f := strings.Fields(string(b)); len(f) > 2 && f[2] == "Z" {
		return nil
	}
	return errors.New("QEMU still runs after Stop")
}

func itoa(i int) string { return strconv.Itoa(i) }
