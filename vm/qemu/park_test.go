//go:build linux

package qemu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/guest/api"
	"github.com/airlock-sandbox/airlock/internal/leakcheck"
	"github.com/airlock-sandbox/airlock/vm"
)

// TestParkFakeQEMU runs the templates' flows that need no package
// variable changed, in parallel.
func TestParkFakeQEMU(t *testing.T) {
	leakcheck.Goroutines(t)

	t.Run("save-then-restore", func(t *testing.T) {
		t.Parallel()
		f := newParkFake(t, fakeNormal)
		m1 := f.start(t, f.opts)
		echo(t, m1)
		if m1.Restored() {
			t.Error("the first machine says it was restored")
		}
		r1 := f.run(t, m1.Info().PID)
		args := joinArgs(r1.args)
		if !strings.Contains(args, "airlock.park=1") || !strings.Contains(args, "-chardev socket,id=qmp,fd=4 -mon chardev=qmp,mode=control") || r1.incoming() {
			t.Errorf("the booting QEMU's args: %s", args)
		}
		if r1.wake == "" {
			t.Error("the parked guest got no Wake")
		}
		if want := []string{"qmp_capabilities", "migrate-set-parameters", "migrate-set-capabilities", "stop", "getfd", "migrate", "query-migrate", "cont"}; !inOrder(r1.qmp, want) || slices.Contains(r1.qmp, "query-status") {
			t.Errorf("machine protocol of the save: %q, want %q", r1.qmp, want)
		}
		f.savedBy(t, r1.pid)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := m1.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		if err := wait(t, m1); err != nil {
			t.Errorf("Wait after Stop: %v", err)
		}

		m2 := f.start(t, f.opts) // a run folder of its own: another console log and pid file
		if !m2.Restored() {
			t.Error("the second machine was not started from the template")
		}
		echo(t, m2)
		r2 := f.run(t, m2.Info().PID)
		if !slices.Contains(r2.args, "-incoming") || !strings.Contains(joinArgs(r2.args), "-chardev socket,id=qmp,fd=4") {
			t.Errorf("the restoring QEMU's args: %s", joinArgs(r2.args))
		}
		if r2.wake == "" || r2.wake == r1.wake {
			t.Errorf("Wake entropy: first %q, second %q: want two different", r1.wake, r2.wake)
		}
		if want := []string{"qmp_capabilities", "migrate-set-capabilities", "migrate-incoming", "query-status", "query-status", "cont", "query-status"}; !inOrder(r2.qmp, want) || slices.Contains(r2.qmp, "migrate") {
			t.Errorf("machine protocol of the load: %q, want %q", r2.qmp, want)
		}
		// The guest's memory came with the template, not in QEMU's stream.
		if want := fmt.Sprintf("booted by pid %d", r1.pid); r2.memory != want {
			t.Errorf("the restored guest's memory holds %q, want %q (the saved guest's)", r2.memory, want)
		}
		for _, r := range []fakeRun{r1, r2} {
			if a := joinArgs(r.args); !strings.Contains(a, "memory-backend=ram") || !strings.Contains(a, "-object memory-backend-file,id=ram,size=256M,share=on,mem-path=/proc/self/fd/") {
				t.Errorf("QEMU %d's guest memory is not in a shared memory file: %s", r.pid, a)
			}
		}
		f.savedBy(t, r1.pid) // kept, not saved again
		if rs := f.runs(t); len(rs) != 2 {
			t.Errorf("%d QEMUs started, want 2", len(rs))
		}
	})

	// A template that will not load is discarded, and the machine boots
	// in the same Start, saving a fresh one.
	for _, mode := range []string{fakeLoadExits, fakeLoadBroken} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			f := newParkFake(t, mode)
			m1 := f.start(t, f.opts)
			echo(t, m1)
			f.savedBy(t, m1.Info().PID)
			m1.Stop(context.Background())

			m2 := f.start(t, f.opts)
			if m2.Restored() {
				t.Error("restored from a template that did not load")
			}
			echo(t, m2)
			f.savedBy(t, m2.Info().PID) // replaced by the boot's
			rs := f.runs(t)
			if len(rs) != 3 || rs[0].incoming() || !rs[1].incoming() || rs[2].incoming() {
				t.Fatalf("QEMUs started: %+v, want a boot, a load, a boot", rs)
			}
			if rs[1].wake != "" {
				t.Error("the QEMU that failed to load got a Wake")
			}
			if rs[2].pid != m2.Info().PID {
				t.Errorf("the machine's QEMU is %d, want the second boot's %d", m2.Info().PID, rs[2].pid)
			}
		})
	}

	t.Run("not-parked", func(t *testing.T) {
		t.Parallel()
		f := newParkFake(t, fakeGarbage)
		m := f.start(t, f.opts)
		err := wait(t, m)
		if err == nil || !strings.Contains(err.Error(), "did not park") {
			t.Fatalf("Wait = %v, want the guest did not park", err)
		}
		if s := m.State(); s != vm.StateFailed {
			t.Errorf("state %s", s)
		}
		if saved, tmp := f.templates(t); len(saved)+len(tmp) > 0 {
			t.Errorf("templates %q, temporary files %q after a guest that did not park", saved, tmp)
		}
	})

	t.Run(fakeSaveFails, func(t *testing.T) {
		t.Parallel()
		f := newParkFake(t, fakeSaveFails)
		m := f.start(t, f.opts)
		echo(t, m)
		r := f.run(t, m.Info().PID)
		if want := []string{"stop", "getfd", "migrate", "query-migrate", "cont"}; !inOrder(r.qmp, want) {
			t.Errorf("machine protocol: %q, want %q", r.qmp, want)
		}
		if r.wake == "" {
			t.Error("no Wake after a failed save")
		}
		if saved, tmp := f.templates(t); len(saved)+len(tmp) > 0 {
			t.Errorf("templates %q, temporary files %q after a failed save", saved, tmp)
		}
	})

	t.Run("templates-off", func(t *testing.T) {
		t.Parallel()
		f := newParkFake(t, fakeNormal)
		opts := f.opts
		opts.Templates = TemplatesOff
		m := f.start(t, opts)
		if m.tpl != nil {
			t.Errorf("a template start (templates folder %q) with templates off", m.tpl.tmpl.dir)
		}
		echo(t, m) // the guest's hello came first thing, and was read
		r := f.run(t, m.Info().PID)
		args := joinArgs(r.args)
		if strings.Contains(args, "id=qmp") || strings.Contains(args, "-mon") || strings.Contains(args, "airlock.park") || r.incoming() {
			t.Errorf("args with templates off: %s", args)
		}
		if r.wake != "" || len(r.qmp) > 0 {
			t.Errorf("with templates off: wake %q, machine protocol %q", r.wake, r.qmp)
		}
		if _, err := os.Stat(filepath.Join(f.opts.CacheDir, "templates")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("templates folder: %v", err)
		}
		if m.Restored() {
			t.Error("restored with templates off")
		}
	})
}

// TestTemplateRestoredGuestSilent: a guest restored from a template that
// does not greet the host after its Wake ends the machine, which then
// says its restore failed (vm.Restorer), and its template is discarded.
func TestTemplateRestoredGuestSilent(t *testing.T) {
	leakcheck.Goroutines(t)
	old := greetTimeout
	greetTimeout = 200 * time.Millisecond
	t.Cleanup(func() { greetTimeout = old })

	f := newParkFake(t, fakeSilent)
	m1 := f.start(t, f.opts)
	echo(t, m1)
	f.savedBy(t, m1.Info().PID)
	m1.Stop(context.Background())
	if m1.RestoreFailed() {
		t.Error("RestoreFailed = true for the machine that booted and was stopped")
	}

	m2 := f.start(t, f.opts)
	if !m2.Restored() {
		t.Fatal("not started from the template")
	}
	err := wait(t, m2)
	if err == nil || !strings.Contains(err.Error(), "did not answer") {
		t.Fatalf("Wait = %v, want the template's guest's silence", err)
	}
	if !m2.RestoreFailed() {
		t.Error("RestoreFailed = false after the template's guest was silent")
	}
	if s := m2.State(); s != vm.StateFailed {
		t.Errorf("state %s", s)
	}
	if r := f.run(t, m2.Info().PID); r.wake == "" || !r.incoming() {
		t.Errorf("the restored QEMU: incoming %v, wake %q", r.incoming(), r.wake)
	}
	if saved, tmp := f.templates(t); len(saved)+len(tmp) > 0 {
		t.Errorf("templates %q, temporary files %q: want the silent one discarded", saved, tmp)
	}
}

// TestTemplateSaveTimeout: a save that does not end in saveTimeout is
// given up, and the machine goes on without a template, as save says.
func TestTemplateSaveTimeout(t *testing.T) {
	leakcheck.Goroutines(t)
	old := saveTimeout
	saveTimeout = 200 * time.Millisecond
	t.Cleanup(func() { saveTimeout = old })

	f := newParkFake(t, fakeSaveHangs)
	m := f.start(t, f.opts)
	echo(t, m)
	r := f.run(t, m.Info().PID)
	if want := []string{"migrate", "query-migrate", "migrate_cancel", "cont"}; !inOrder(r.qmp, want) {
		t.Errorf("machine protocol: %q, want %q", r.qmp, want)
	}
	if saved, tmp := f.templates(t); len(saved)+len(tmp) > 0 {
		t.Errorf("templates %q, temporary files %q after a save given up", saved, tmp)
	}
}

// TestParkWhen: only a machine whose state QEMU can save and restore
// parks.
func TestParkWhen(t *testing.T) {
	share := &vm.Share{HostPath: "/home/u/proj"}
	for _, tc := range []struct {
		name      string
		templates string
		transport api.Transport
		share     *vm.Share
		fs        string
		disks     []vm.Disk
		want      bool
	}{
		{"serial", TemplatesAuto, api.TransportSerial, nil, "", nil, true},
		{"templates off", TemplatesOff, api.TransportSerial, nil, "", nil, false},
		{"vsock", TemplatesAuto, api.TransportVsock, nil, "", nil, false},
		{"9p share", TemplatesAuto, api.TransportSerial, share, Share9P, nil, true},
		{"virtiofs share", TemplatesAuto, api.TransportSerial, share, ShareVirtiofs, nil, false},
		{"disk", TemplatesAuto, api.TransportSerial, nil, "", []vm.Disk{{Path: "/img/root.ext4", ReadOnly: true}}, false},
		{"writable disk, no changes held", TemplatesAuto, api.TransportSerial, share, Share9P, []vm.Disk{{Path: "/s/data.vhd"}}, false},
		{"changes layer", TemplatesAuto, api.TransportSerial, share, Share9P, []vm.Disk{{Path: "/s/layer.vhd"}}, true},
		{"changes layer and root disk", TemplatesAuto, api.TransportSerial, share, Share9P,
			[]vm.Disk{{Path: "/img/root.ext4", ReadOnly: true}, {Path: "/s/layer.vhd"}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var cmdline []string
			if strings.HasPrefix(tc.name, "changes") {
				cmdline = api.BootConfig{Changes: true}.Args()
			}
			m := &Machine{cfg: vm.Config{Share: tc.share, Disks: tc.disks, Cmdline: cmdline}, opts: resolved{Options: Options{Templates: tc.templates}}}
			m.tr = &vsockTransport{}
			if tc.transport == api.TransportSerial {
				m.tr = &muxTransport{}
			}
			m.tpl = templateStartFor(m)
			if got := m.parks(tc.fs); got != tc.want {
				t.Errorf("parks = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestTemplateStopWhileLoading: a Stop that comes while a template loads
// ends the start and leaves no QEMU behind, though the QEMU it should
// stop was not the machine's yet.
func TestTemplateStopWhileLoading(t *testing.T) {
	leakcheck.Goroutines(t)
	f := newParkFake(t, fakeLoadHangs)
	m1 := f.start(t, f.opts)
	echo(t, m1)
	f.savedBy(t, m1.Info().PID)
	m1.Stop(context.Background())

	cfg := f.cfg
	cfg.Dir = t.TempDir()
	m2, err := New(cfg, f.opts)
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go func() { started <- m2.Start(ctx) }()
	// Until the second fake QEMU runs: the one loading the template.
	for deadline := time.Now().Add(10 * time.Second); len(f.runs(t)) < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the loading QEMU never started")
		}
	}
	sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer scancel()
	if err := m2.Stop(sctx); err != nil {
		t.Fatal(err)
	}
	if sctx.Err() != nil {
		t.Error("Stop waited out its context: the start it came during did not end")
	}
	if err := <-started; !errors.Is(err, context.Canceled) {
		t.Errorf("Start during which Stop came = %v, want it cancelled", err)
	}
	for _, r := range f.runs(t) {
		for deadline := time.Now().Add(5 * time.Second); processGone(r.pid) != nil; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("fake QEMU %d still runs after Stop", r.pid)
			}
		}
	}
}
