//go:build e2e

package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/app/sandbox"
	"github.com/airlock-sandbox/airlock/tests/internal/vmharness"
	"github.com/airlock-sandbox/airlock/vm"
	"github.com/airlock-sandbox/airlock/vm/qemu"
)

// bootCached boots a sandbox on ws whose machines keep their templates in
// cache (vm/qemu template.go), and closes it when t ends.
func bootCached(t *testing.T, cache, ws string, readOnly bool) *sandbox.Sandbox {
	t.Helper()
	sb, err := startCached(t, cache, ws, readOnly)
	if err != nil {
		t.Fatal(err)
	}
	return sb
}

// startCached is bootCached for a goroutine: it returns the error.
func startCached(t *testing.T, cache, ws string, readOnly bool) (*sandbox.Sandbox, error) {
	return startWith(t, ws, readOnly, qemu.Options{CacheDir: cache, Templates: qemu.TemplatesAuto})
}

// startWith starts a sandbox on ws whose machines are made with opts, and
// closes it when t ends (a test may Close it sooner: Close is idempotent).
func startWith(t *testing.T, ws string, readOnly bool, opts qemu.Options) (*sandbox.Sandbox, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sb, err := vmharness.Boot(ctx, image, sandbox.Options{
		Workspace: ws, ReadOnly: readOnly, ConsoleLog: filepath.Join(t.TempDir(), "console.log"),
		NewMachine: func(cfg vm.Config) (vm.Machine, error) { return qemu.New(cfg, opts) },
	})
	if err == nil {
		t.Cleanup(func() { vmharness.Close(sb) })
	}
	return sb, err
}

// templateFiles lists the templates (and unfinished saves) in cache.
func templateFiles(t *testing.T, cache string) (done, unfinished []string) {
	t.Helper()
	ents, _ := os.ReadDir(filepath.Join(cache, "templates"))
	for _, e := range ents {
		switch {
		case strings.HasSuffix(e.Name(), ".vmstate"):
			done = append(done, filepath.Join(cache, "templates", e.Name()))
		case strings.HasSuffix(e.Name(), ".tmp"):
			unfinished = append(unfinished, e.Name())
		}
	}
	return done, unfinished
}

// TestTemplates: the first machine of a shape boots and saves a template;
// the next ones start from it, two at once, each with its own workspace,
// clock and random numbers, as the task user; a read-only share is its own
// template and stays read-only.
func TestTemplates(t *testing.T) {
	cache := t.TempDir()
	first := bootCached(t, cache, newWorkspace(t), false)
	if vm.Restored(first.Machine()) {
		t.Fatal("the first machine of an empty cache says it was restored")
	}
	saved, unfinished := templateFiles(t, cache)
	if len(saved) != 1 || len(unfinished) != 0 {
		t.Fatalf("after the first boot: templates %v, unfinished %v", saved, unfinished)
	}
	vmharness.Close(first)

	wss := []string{newWorkspace(t), newWorkspace(t)}
	sbs := make([]*sandbox.Sandbox, len(wss))
	var wg sync.WaitGroup
	for i, ws := range wss {
		os.WriteFile(filepath.Join(ws, "mine.txt"), []byte("workspace "+strconv.Itoa(i)), 0o644)
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if sbs[i], err = startCached(t, cache, ws, false); err != nil {
				t.Errorf("machine %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	random := map[string]bool{}
	for i, sb := range sbs {
		if !vm.Restored(sb.Machine()) {
			t.Errorf("machine %d booted instead of starting from the template", i)
		}
		checkRestoredResident(t, sb)
		hostNow := time.Now().Unix()
		r := vmharness.Exec(t, sb, shell(`cat /workspace/mine.txt; echo; id -u; date +%s; echo written > /workspace/out.txt; `+
			`cat /proc/sys/kernel/random/uuid; head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n'; echo`), nil)
		lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
		if r.Exit.Code != 0 || len(lines) != 5 {
			t.Fatalf("machine %d: %s", i, r)
		}
		if want := "workspace " + strconv.Itoa(i); lines[0] != want {
			t.Errorf("machine %d sees %q in its workspace, want %q", i, lines[0], want)
		}
		if lines[1] != strconv.Itoa(vmharness.TaskUID) && os.Getuid() == 0 {
			t.Errorf("machine %d runs tasks as uid %s", i, lines[1])
		}
		if guest, _ := strconv.ParseInt(lines[2], 10, 64); guest < hostNow-5 || guest > hostNow+5 {
			t.Errorf("machine %d's clock says %d, the host's %d: the wake did not set it", i, guest, hostNow)
		}
		if b, err := os.ReadFile(filepath.Join(wss[i], "out.txt")); err != nil || string(b) != "written\n" {
			t.Errorf("machine %d's write to its workspace: %q, %v", i, b, err)
		}
		for _, v := range lines[3:] {
			if random[v] {
				t.Errorf("two machines started from one template drew the same random value %s: the wake did not reseed the kernel's generator", v)
			}
			random[v] = true
		}
	}

	// The kernel's generator also reseeds itself on a schedule (up to a
	// second apart this early in a guest's life), from interrupt timings
	// that differ from machine to machine: only a draw right after the
	// start shows whether the wake reseeded it. One machine at a time,
	// each drawing first thing.
	draws := map[string]int{}
	for i := range 3 {
		sb := bootCached(t, cache, newWorkspace(t), false)
		r := vmharness.Exec(t, sb, shell("head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n'"), nil)
		vmharness.Close(sb)
		if r.Exit.Code != 0 || len(r.Stdout) != 32 {
			t.Fatalf("draw on machine %d: %s", i, r)
		}
		if j, seen := draws[r.Stdout]; seen {
			t.Errorf("machines %d and %d, started from one template, drew the same first random bytes %s: the wake did not reseed the kernel's generator", j, i, r.Stdout)
		}
		draws[r.Stdout] = i
	}

	// A read-only share makes another template, and stays read-only when
	// started from it.
	for i := range 2 {
		ro := newWorkspace(t)
		sb := bootCached(t, cache, ro, true)
		if got := vm.Restored(sb.Machine()); got != (i == 1) {
			t.Errorf("read-only machine %d: restored %v", i, got)
		}
		r := vmharness.Exec(t, sb, shell("echo x > /workspace/f 2>&1; echo $?"), nil)
		if strings.TrimSpace(r.Stdout) == "0" {
			t.Errorf("read-only machine %d wrote to its workspace", i)
		}
		vmharness.Close(sb)
	}
	if saved, _ := templateFiles(t, cache); len(saved) != 2 {
		t.Errorf("templates after a writable and a read-only share: %v", saved)
	}
}

// checkRestoredResident checks that a machine started from a template
// holds about what its guest uses, not all of its memory: QEMU's own load
// of a template's memory writes every page of it, which leaves the machine
// with all of its memory resident, where a booted one holds a fraction.
// The guest's memory in a file of its own (vm/qemu template.go) keeps the
// restored machine near the booted one (figures: docs/performance.md,
// What changed: templates keep the guest's memory in a file of its own).
func checkRestoredResident(t *testing.T, sb *sandbox.Sandbox) {
	t.Helper()
	kib, err := vmharness.ResidentKiB(sb.Machine().Info().PID)
	if err != nil {
		t.Errorf("QEMU's resident memory: %v", err)
		return
	}
	t.Logf("QEMU of a machine started from a template: %d MiB resident (guest memory %d MiB)", kib>>10, sandbox.DefaultMemoryMiB)
	if kib>>10 > sandbox.DefaultMemoryMiB/2 {
		t.Errorf("QEMU of a machine started from a template holds %d MiB resident, more than half its guest's %d MiB: the load touched memory the guest never did", kib>>10, sandbox.DefaultMemoryMiB)
	}
}

// TestTemplateBroken: a template that no longer loads (here cut short, as
// a crash or a full disk might leave one written by something else) is
// discarded; that machine boots and saves a good one, which the next
// machine starts from.
func TestTemplateBroken(t *testing.T) {
	cache := t.TempDir()
	vmharness.Close(bootCached(t, cache, newWorkspace(t), false))
	saved, _ := templateFiles(t, cache)
	if len(saved) != 1 {
		t.Fatalf("templates: %v", saved)
	}
	fi, err := os.Stat(saved[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(saved[0], fi.Size()/2); err != nil {
		t.Fatal(err)
	}
	sb := bootCached(t, cache, newWorkspace(t), false)
	if vm.Restored(sb.Machine()) {
		t.Fatal("a machine says it started from a template cut in half")
	}
	if r := vmharness.Exec(t, sb, shell("echo ok"), nil); r.Stdout != "ok\n" {
		t.Fatalf("the machine that booted instead: %s", r)
	}
	vmharness.Close(sb)
	if fi2, err := os.Stat(saved[0]); err != nil || fi2.Size() < fi.Size()/2+1 {
		t.Fatalf("the broken template was not replaced by a whole one: %v, %v", fi2, err)
	}
	if sb := bootCached(t, cache, newWorkspace(t), false); !vm.Restored(sb.Machine()) {
		t.Error("the next machine did not start from the new template")
	}
}

// TestTemplateDiskFull: a cache folder with no room for a template leaves
// the machine running, and no partial file behind.
func TestTemplateDiskFull(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("mounting a small tmpfs needs root")
	}
	cache := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", cache).CombinedOutput(); err != nil {
		t.Skipf("mount a tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", cache).Run() })
	sb := bootCached(t, cache, newWorkspace(t), false)
	if r := vmharness.Exec(t, sb, shell("echo ok"), nil); r.Stdout != "ok\n" {
		t.Fatalf("the machine whose template did not fit: %s", r)
	}
	saved, unfinished := templateFiles(t, cache)
	if len(saved)+len(unfinished) != 0 {
		t.Errorf("a full cache folder kept %v %v", saved, unfinished)
	}
}

// TestTemplatesQ35: q35, the machine QEMU gets wherever KVM works and
// wherever the host's TSC rate is not measured, saves and restores its
// templates too. On a CI host whose TSC qualifies, every other test runs
// on microvm, so without this no q35 guest would start from a template
// there: the PCI devices' state (virtio-serial, 9p) must survive QEMU's
// migration as the virtio-mmio ones do.
func TestTemplatesQ35(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("q35 is an amd64 machine")
	}
	opts := qemu.Options{CacheDir: t.TempDir(), Templates: qemu.TemplatesAuto, Machine: qemu.MachineQ35}
	first, err := startWith(t, newWorkspace(t), false, opts)
	if err != nil {
		t.Fatal(err)
	}
	if info, restored := first.Machine().Info(), vm.Restored(first.Machine()); info.Machine != qemu.MachineQ35 || restored {
		t.Fatalf("the first q35 machine: machine %q, restored %v", info.Machine, restored)
	}
	if saved, unfinished := templateFiles(t, opts.CacheDir); len(saved) != 1 || len(unfinished) != 0 {
		t.Fatalf("after the first q35 boot: templates %v, unfinished %v", saved, unfinished)
	}
	firstDraw := vmharness.Exec(t, first, shell("head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n'"), nil)
	vmharness.Close(first)

	ws := newWorkspace(t)
	os.WriteFile(filepath.Join(ws, "mine.txt"), []byte("q35 workspace"), 0o644)
	began := time.Now()
	sb, err := startWith(t, ws, false, opts)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(began)
	if info, restored := sb.Machine().Info(), vm.Restored(sb.Machine()); info.Machine != qemu.MachineQ35 || !restored {
		t.Fatalf("the second q35 machine: machine %q, restored %v (want q35 from the first one's template)", info.Machine, restored)
	}
	t.Logf("q35 from its template: ready in %v", took.Round(time.Millisecond))
	checkRestoredResident(t, sb)
	hostNow := time.Now().Unix()
	r := vmharness.Exec(t, sb, shell(`head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n'; echo; cat /workspace/mine.txt; echo; `+
		`date +%s; echo written > /workspace/out.txt; ls /sys/bus/pci/devices | wc -l`), nil)
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	if r.Exit.Code != 0 || len(lines) != 4 {
		t.Fatalf("task on the restored q35 machine: %s", r)
	}
	if lines[0] == strings.TrimSpace(firstDraw.Stdout) {
		t.Errorf("the restored q35 machine drew the same first random bytes as the one that saved it: %s", lines[0])
	}
	if lines[1] != "q35 workspace" {
		t.Errorf("the restored q35 machine sees %q in its workspace", lines[1])
	}
	if guest, _ := strconv.ParseInt(lines[2], 10, 64); guest < hostNow-5 || guest > hostNow+5 {
		t.Errorf("the restored q35 machine's clock says %d, the host's %d", guest, hostNow)
	}
	if n, _ := strconv.Atoi(lines[3]); n == 0 {
		t.Error("the restored q35 machine has no PCI devices")
	}
	if b, err := os.ReadFile(filepath.Join(ws, "out.txt")); err != nil || string(b) != "written\n" {
		t.Errorf("the restored q35 machine's write to its workspace: %q, %v", b, err)
	}
}
