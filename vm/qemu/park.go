package qemu

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/guest/api"
	"github.com/airlock-sandbox/airlock/vm"
)

// Bounds of the park (template.go). The guest is hostile and QEMU runs it,
// so every wait on either ends.
var (
	// parkTimeout bounds the wait for a booting guest's api.Parked. The
	// caller's boot timeout (the sandbox's) is normally the shorter; this
	// only keeps the wait from outliving a caller that has none.
	parkTimeout = 10 * time.Minute
	// loadTimeout bounds QEMU's load of a template until it runs the
	// guest: a few hundred KB of machine state from a local file (the
	// guest's memory is copied before QEMU starts), well under a second
	// under TCG, most of it QEMU's own start.
	loadTimeout = 60 * time.Second
	// greetTimeout bounds how long a guest started from a template may
	// take after its Wake to greet the host (the multiplexer's hello,
	// its first act: a fraction of a second under TCG, nearly all of it
	// translating code its QEMU never ran).
	// One that does not is taken for a template that restores to a broken
	// guest: it is discarded.
	greetTimeout = 20 * time.Second
	// saveTimeout bounds the save of a template: a few hundred KB of
	// machine state and the tens of MB of memory the guest touched, to
	// local files.
	saveTimeout = 2 * time.Minute
)

// templateStart is the start of a machine whose guest parks (parks): from
// its template when there is one that loads, else by booting, saving a
// template once the guest has parked. It speaks the park protocol (Parked,
// Wake) on the multiplexer's socket before the multiplexer begins.
type templateStart struct {
	m    *Machine
	mux  *muxTransport
	tmpl templates // dir "": no cache folder, so none is loaded or saved

	mu          sync.Mutex
	wasRestored bool  // started from a template
	silent      error // the template's guest did not answer its wake: why the host ends the machine
}

// templateStartFor is m's template start, or nil when m's guest never
// parks: that needs the serial transport (a vsock device's connections do
// not survive QEMU's migration), templates not turned off, and a host with
// memory files (Linux).
func templateStartFor(m *Machine) *templateStart {
	mt, ok := m.tr.(*muxTransport)
	if !ok || !haveRAMFiles || m.opts.Templates == TemplatesOff {
		return nil
	}
	t := &templateStart{m: m, mux: mt}
	if m.opts.CacheDir != "" {
		t.tmpl = templates{dir: filepath.Join(m.opts.CacheDir, "templates"), now: time.Now}
	}
	return t
}

func (t *templateStart) restored() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.wasRestored
}

// failed reports whether the machine ended because its template's guest
// did not answer: silent is then the reason it ended with (exitErr), which
// it is not when the machine was being stopped anyway (failBoot) or had
// already ended otherwise.
func (t *templateStart) failed() bool {
	t.mu.Lock()
	why := t.silent
	t.mu.Unlock()
	if why == nil {
		return false
	}
	t.m.mu.Lock()
	defer t.m.mu.Unlock()
	return t.m.exitErr == why
}

// parks reports whether this machine's guest boots to park, so that it
// can start from a template or save one: a template start (templateStartFor),
// no share or a 9p one (QEMU migrates a 9p device while the guest has it
// unmounted, which a parked guest has; virtiofs's vhost-user device not at
// all), and no disks but a changes layer (the standard image switches its
// root to a disk during the boot).
func (m *Machine) parks(share string) bool {
	return m.tpl != nil && (m.cfg.Share == nil || share == Share9P) && (len(m.cfg.Disks) == 0 || layerOnly(m.cfg))
}

// layerOnly reports whether cfg's disks are only a changes layer
// (api.BootConfig.Changes): writable disks of a guest told to hold its
// changes. Such a guest reads no disk before its wake (guest/boot loads
// virtio_blk only then), so a template holds nothing of the disk of the
// machine that saved it, and its disks are opened by each machine as its
// own; the disk's path is left out of the template's key (templateKey).
func layerOnly(cfg vm.Config) bool {
	if !slices.Contains(cfg.Cmdline, api.BootConfig{Changes: true}.Args()[0]) {
		return false
	}
	for _, d := range cfg.Disks {
		if d.ReadOnly {
			return false
		}
	}
	return true
}

// start starts a parking guest: from its template when there is one that
// loads, else by booting it, and then saving its template once it has
// parked (awaitPark).
func (t *templateStart) start(ctx context.Context, p plan, accel string) error {
	m := t.m
	key, err := templateKey(p, m.opts.QEMU)
	if err != nil {
		m.log.Warn("no template for this machine", "err", err)
	}
	if key != "" {
		if state, ram := t.tmpl.open(key); state != nil {
			pr, loaded, err := t.load(ctx, p, accel, state, ram)
			state.Close()
			ram.Close()
			if err == nil {
				t.mu.Lock()
				t.wasRestored = true
				t.mu.Unlock()
				m.commit(pr, p)
				go t.wakeLoaded(key)
				return nil
			}
			if ctx.Err() != nil {
				return fmt.Errorf("qemu: start: %w", ctx.Err())
			}
			if !loaded {
				// QEMU did not start (a descriptor limit, a folder the
				// folder's owner cannot read): the template may be fine,
				// and the boot would fail the same way.
				return err
			}
			// Nothing reached the guest's port (the Wake goes only to a
			// guest that runs), so the same socket pair serves the boot.
			m.log.Warn("the template would not load: discarded; booting instead, and saving a new one",
				"template", t.tmpl.path(key), "err", err)
			if err := t.tmpl.discard(key); err != nil {
				m.log.Warn("discard template", "err", err)
			}
		}
	}
	ram, err := newRAM(int64(p.MemoryMiB) << 20)
	if err != nil {
		return fmt.Errorf("qemu: start: %w", err)
	}
	pr, err := m.spawn(ctx, p, accel, launch{ram: ram, qmp: key != "" && t.tmpl.dir != ""})
	if err != nil {
		ram.Close()
		return err
	}
	m.commit(pr, p)
	if err := m.settle(ctx); err != nil {
		if pr.qmp != nil {
			pr.qmp.Close()
		}
		return err
	}
	go t.awaitPark(pr.qmp, key)
	return nil
}

// load starts QEMU on a template, its machine state and its guest memory
// ram, and waits until it runs the guest. On failure nothing is left
// running and nothing has reached the guest; started says whether QEMU
// ran, so that the failure is the template's.
func (t *templateStart) load(ctx context.Context, p plan, accel string, state, ram *os.File) (pr *proc, started bool, err error) {
	m := t.m
	began := time.Now()
	mem, err := newRAM(int64(p.MemoryMiB) << 20)
	if err != nil {
		return nil, false, fmt.Errorf("qemu: start: %w", err)
	}
	n, err := copyData(mem, ram, int64(p.MemoryMiB)<<20)
	if err != nil {
		// A template whose memory cannot be read is discarded, as one
		// QEMU cannot load is.
		mem.Close()
		return nil, true, fmt.Errorf("qemu: start: the template's guest memory: %w", err)
	}
	m.log.Debug("guest memory copied from the template", "bytes", n, "took", time.Since(began).Round(time.Microsecond))
	pr, err = m.spawn(ctx, p, accel, launch{ram: mem, incoming: state, qmp: true})
	if err != nil {
		mem.Close()
		var fail *qemuFailed
		return nil, errors.As(err, &fail), err
	}
	m.log.Debug("QEMU speaks its machine protocol", "took", time.Since(began).Round(time.Microsecond))
	lctx, cancel := context.WithTimeout(ctx, loadTimeout)
	defer cancel()
	err = ignoreSharedMemory(lctx, pr.qmp)
	if err == nil {
		err = pr.qmp.execute(lctx, "migrate-incoming", map[string]any{"uri": fmt.Sprintf("fd:%d", pr.incomingFD)}, nil)
	}
	if err == nil {
		err = awaitRunning(lctx, pr.qmp)
	}
	pr.qmp.Close()
	pr.qmp = nil
	if err != nil {
		pr.kill()
		mem.Close()
		return nil, true, fmt.Errorf("%w%s", err, stderrHint(pr.stderr))
	}
	m.log.Info("started from a template", "took", time.Since(began).Round(time.Millisecond))
	return pr, true, nil
}

// awaitRunning polls QEMU's status until it has loaded the template, and
// lets the guest run. A template is saved paused, and QEMU 7.2 leaves the
// machine it loads in the state the saved one was in.
func awaitRunning(ctx context.Context, q *qmp) error {
	for {
		var st struct {
			Status string `json:"status"`
		}
		if err := q.execute(ctx, "query-status", nil, &st); err != nil {
			return fmt.Errorf("load the template: %w", err)
		}
		switch st.Status {
		case "running":
			return nil
		case "paused":
			if err := q.execute(ctx, "cont", nil, nil); err != nil {
				return fmt.Errorf("run the loaded template: %w", err)
			}
			continue
		case "inmigrate":
		default:
			return fmt.Errorf("load the template: QEMU is %q, not running the guest", st.Status)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("load the template: %w", ctx.Err())
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// awaitPark waits for the booting guest to park, saves its template (with
// q; nil: none is saved) and wakes it. A guest that does not park ends the
// machine.
func (t *templateStart) awaitPark(q *qmp, key string) {
	m := t.m
	if q != nil {
		defer q.Close()
	}
	_ = t.mux.host.SetReadDeadline(time.Now().Add(parkTimeout))
	err := api.ReadParked(t.mux.host)
	_ = t.mux.host.SetReadDeadline(time.Time{})
	if err != nil {
		m.failBoot(fmt.Errorf("qemu: the guest did not park: %w", err))
		return
	}
	if q != nil {
		if err := t.save(q, key); err != nil {
			m.failBoot(err)
			return
		}
	}
	t.wake()
}

// save saves the parked machine's state as key's template and lets the
// machine go on. A template that cannot be saved (a full disk, a QEMU that
// refuses) is only logged: this machine goes on, and the next one boots
// too. An error means the machine could not be resumed.
func (t *templateStart) save(q *qmp, key string) error {
	m := t.m
	ctx, cancel := context.WithTimeout(context.Background(), saveTimeout)
	defer cancel()
	began := time.Now()
	state, ram, commit, abort, err := t.tmpl.create(key)
	if err == nil {
		var size, mem int64
		if size, err = saveState(ctx, q, state); err == nil {
			// The guest is paused: its memory is what it parked with.
			m.mu.Lock()
			guest := m.ram
			m.mu.Unlock()
			if guest == nil {
				err = errors.New("the machine has no memory file")
			} else {
				mem, err = copyData(ram, guest, int64(m.cfg.MemoryMiB)<<20)
			}
		}
		if err == nil {
			err = commit()
		} else {
			abort()
		}
		if err == nil {
			m.log.Info("saved a template", "template", t.tmpl.path(key), "state_bytes", size, "memory_bytes", mem, "took", time.Since(began).Round(time.Millisecond),
				"qemu", fmt.Sprintf("%d.%d.%d (%s)", q.version.Major, q.version.Minor, q.version.Micro, q.version.Package))
		}
	}
	if err != nil {
		m.log.Warn("could not save a template: this machine goes on, the next one boots too", "err", err)
	}
	// A fresh bound: the save's may be what ran out.
	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	if err := q.execute(cctx, "cont", nil, nil); err != nil {
		return fmt.Errorf("qemu: resume the guest after saving its template: %w", err)
	}
	return nil
}

// saveState pauses the machine and writes its state into f (QEMU's
// migration stream), returning its size. The machine stays paused.
func saveState(ctx context.Context, q *qmp, f *os.File) (int64, error) {
	// No rate limit: the file is local, and the guest waits (QEMU 7.2
	// limits a migration to 128 MiB/s by default).
	if err := q.execute(ctx, "migrate-set-parameters", map[string]any{"max-bandwidth": int64(1) << 40}, nil); err != nil {
		return 0, err
	}
	if err := ignoreSharedMemory(ctx, q); err != nil {
		return 0, err
	}
	if err := q.execute(ctx, "stop", nil, nil); err != nil {
		return 0, err
	}
	if err := q.sendFD(ctx, "template", f); err != nil {
		return 0, err
	}
	if err := q.execute(ctx, "migrate", map[string]any{"uri": "fd:template"}, nil); err != nil {
		return 0, err
	}
	size, err := awaitMigration(ctx, q, f)
	if err != nil {
		// A migration still running would keep the machine from
		// resuming; cancel it, with a bound of its own.
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = q.execute(cctx, "migrate_cancel", nil, nil)
	}
	return size, err
}

// ignoreSharedMemory has QEMU's migration leave out the guest's memory,
// which lives in the memory file the host shares (template.go): the
// stream then holds the machine state only. Both ends of a migration must
// say so (QEMU 7.2 takes the capability only through its protocol).
func ignoreSharedMemory(ctx context.Context, q *qmp) error {
	return q.execute(ctx, "migrate-set-capabilities", map[string]any{
		"capabilities": []map[string]any{{"capability": "x-ignore-shared", "state": true}},
	}, nil)
}

// awaitMigration polls the migration into f until it has ended.
func awaitMigration(ctx context.Context, q *qmp, f *os.File) (int64, error) {
	for {
		var st struct {
			Status string `json:"status"`
			Error  string `json:"error-desc"`
		}
		if err := q.execute(ctx, "query-migrate", nil, &st); err != nil {
			return 0, err
		}
		switch st.Status {
		case "completed":
			fi, err := f.Stat()
			if err != nil {
				return 0, err
			}
			return fi.Size(), nil
		case "failed", "cancelled":
			return 0, fmt.Errorf("save the machine's state: %s: %s", st.Status, st.Error)
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("save the machine's state: %w", ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// wakeLoaded wakes a guest started from key's template, and discards the
// template if the guest does not greet the host after it: it restored to
// something broken, which every machine started from it would be.
func (t *templateStart) wakeLoaded(key string) {
	m := t.m
	timer := time.NewTimer(greetTimeout)
	defer timer.Stop()
	woke := time.Now()
	t.wake()
	select {
	case <-t.mux.sess.Greeted():
		m.log.Debug("the guest greeted after its wake", "took", time.Since(woke).Round(time.Microsecond))
		return
	case <-m.exited:
		m.mu.Lock()
		asked := m.stopAsked
		m.mu.Unlock()
		if asked {
			return
		}
	case <-timer.C:
	}
	if err := t.tmpl.discard(key); err != nil {
		m.log.Warn("discard template", "err", err)
	}
	// Kept before the machine ends, so that whoever its end wakes can
	// tell why (failed).
	err := fmt.Errorf("qemu: the guest started from a template did not answer within %s of its wake (the template %s is discarded; the next start boots)",
		greetTimeout, t.tmpl.path(key))
	t.mu.Lock()
	t.silent = err
	t.mu.Unlock()
	m.failBoot(err)
}

// wake sends the parked guest its Wake and starts the multiplexer, whose
// hello the guest sends next.
func (t *templateStart) wake() {
	m := t.m
	w := &api.Wake{UnixNanos: time.Now().UnixNano(), Entropy: make([]byte, api.WakeEntropySize)}
	if _, err := rand.Read(w.Entropy); err != nil {
		m.failBoot(fmt.Errorf("qemu: entropy for the guest: %w", err))
		return
	}
	rec, err := api.WakeRecord(w)
	if err != nil {
		m.failBoot(fmt.Errorf("qemu: wake the parked guest: %w", err))
		return
	}
	_ = t.mux.host.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_, err = t.mux.host.Write(rec)
	_ = t.mux.host.SetWriteDeadline(time.Time{})
	if err != nil {
		if !errors.Is(err, net.ErrClosed) {
			m.failBoot(fmt.Errorf("qemu: wake the parked guest: %w", err))
		}
		return
	}
	t.mux.begin()
}

// failBoot ends a machine whose boot went wrong on the host's side of it,
// with err as the reason its Wait reports, unless it is being stopped
// anyway.
func (m *Machine) failBoot(err error) {
	m.mu.Lock()
	if m.stopAsked {
		m.mu.Unlock()
		return // stopping anyway: the guest's silence is no failure
	}
	if m.bootErr == nil {
		m.bootErr = err
	}
	m.mu.Unlock()
	m.log.Warn("ending the machine", "err", err)
	m.kill()
}
