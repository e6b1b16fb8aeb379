package vz

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/Code-Hex/vz/v3"

	"github.com/airlock-sandbox/airlock/guest/api"
	"github.com/airlock-sandbox/airlock/vm"
)

var _ vm.Machine = (*Machine)(nil)

// forceStopWait bounds how long Stop waits for the framework to report the
// machine stopped after a forced stop; it never takes this long in practice.
const forceStopWait = 5 * time.Second

// Machine is one virtual machine run by Apple's Virtualization framework
// inside this process.
//
// The framework VM is created in New, not in Start, because listeners live
// on its virtio-socket device (VZVirtualMachine.socketDevices), which exists
// only once the VM does. So Listen works from New on, and the contract
// "Listen before Start" holds with no queue of pending listeners: a port
// listened on before Start is already served when the guest first
// connects. vz v3 runs every framework call on the VM's own serial
// dispatch queue, so Machine needs neither the main thread nor a run loop.
type Machine struct {
	vm.StateHub
	desc Description
	lim  Limits
	opts Options
	log  *slog.Logger
	vm   *vz.VirtualMachine
	sock *vz.VirtioSocketDevice

	mu          sync.Mutex
	started     bool
	consoleFrom int64 // the console log's size when Start began
	ended       bool  // set by finish: no new listeners
	listeners   map[uint32]*listener
	exitErr     error
	exited      chan struct{} // closed once the machine reached a final state
	cleanOnce   sync.Once
}

// New checks cfg and the kernel, and creates the framework VM; nothing runs
// until Start. An Intel Mac (checkHost), a kernel the framework cannot
// boot, a size outside this Mac's limits, or a missing entitlement is
// reported here.
func New(cfg vm.Config, opts Options) (*Machine, error) {
	if err := checkHost(runtime.GOARCH); err != nil {
		return nil, err
	}
	lim := hostLimits()
	d, err := Describe(cfg, runtime.GOARCH, lim)
	if err != nil {
		return nil, err
	}
	if err := checkKernelFile(d.Arch, d.Boot.Kernel); err != nil {
		return nil, err
	}
	for _, f := range []struct{ what, path string }{{"initrd", d.Boot.Initrd}} {
		if fi, err := os.Stat(f.path); err != nil || !fi.Mode().IsRegular() {
			return nil, fmt.Errorf("vz: %w: %s %s is not a readable file (build the guest image first)", vm.ErrInvalidConfig, f.what, f.path)
		}
	}
	// The console log is created private (and appended to) before the
	// framework opens it.
	f, err := os.OpenFile(d.Console.Path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("vz: console log: %w", err)
	}
	f.Close()
	conf, err := configure(d)
	if err != nil {
		return nil, explainConfigure(err, lim)
	}
	v, err := vz.NewVirtualMachine(conf)
	if err != nil {
		return nil, explain("create the virtual machine", err, errors.Is(err, vz.ErrUnsupportedOSVersion), false, lim)
	}
	socks := v.SocketDevices()
	if len(socks) != 1 {
		return nil, fmt.Errorf("vz: the virtual machine has %d virtio-socket devices, want 1", len(socks))
	}
	m := &Machine{
		desc: d, lim: lim, opts: opts, log: cfg.Log().With("backend", "vz"),
		vm: v, sock: socks[0],
		listeners: map[uint32]*listener{},
		exited:    make(chan struct{}),
	}
	go m.watch()
	return m, nil
}

// watch is the one reader of the framework's state changes; it publishes
// them through the StateHub and ends the machine on a final one.
func (m *Machine) watch() {
	changes := m.vm.StateChangedNotify()
	for {
		select {
		case <-m.exited:
			return
		case s := <-changes:
			m.mu.Lock()
			state, why, ok := transition(m.State(), toEvent(s), m.started)
			if ok && !state.Final() {
				m.Set(state)
			}
			from := m.consoleFrom
			m.mu.Unlock()
			m.log.Debug("state", "vz", s.String(), "state", state, "published", ok)
			if ok && state.Final() {
				if why == nil {
					// A panic resets the guest (panic=-1), which the
					// framework reports as a plain stop.
					why = panicked(consoleTail(m.desc.Console.Path, from))
				}
				m.finish(why)
				return
			}
		}
	}
}

// advance publishes s unless the machine is already past it (see
// transition): Start, Stop and the watcher race to publish.
func (m *Machine) advance(s vm.State) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if cur := m.State(); !cur.Final() && rank[s] > rank[cur] {
		m.Set(s)
	}
}

// Start boots the machine and returns once the framework runs it.
func (m *Machine) Start(ctx context.Context) error {
	m.mu.Lock()
	if m.started || m.State().Final() {
		m.mu.Unlock()
		return fmt.Errorf("vz: %w", vm.ErrAlreadyStarted)
	}
	m.started = true
	m.consoleFrom = consoleSize(m.desc.Console.Path)
	m.mu.Unlock()
	m.advance(vm.StateStarting)
	m.log.Info("starting", "cpus", m.desc.CPUs, "memory", m.desc.MemoryBytes, "cmdline", m.desc.Boot.Cmdline)

	// The framework's start cannot be cancelled; it completes quickly.
	errc := make(chan error, 1)
	go func() { errc <- m.vm.Start() }()
	select {
	case err := <-errc:
		if err != nil {
			err = explain("start", err, errors.Is(err, vz.ErrUnsupportedOSVersion), false, m.lim)
			m.finish(err)
			return err
		}
	case <-ctx.Done():
		if err := <-errc; err == nil {
			m.forceStop()
		}
		err := fmt.Errorf("vz: start: %w", ctx.Err())
		m.finish(err)
		return err
	}
	m.advance(vm.StateRunning)
	return nil
}

// Wait blocks until the machine has stopped: nil after a guest power-off or
// a Stop; errVMError when the framework reported an error, errGuestPanic
// when the guest's kernel panicked, and Stop's error when the framework
// never confirmed a forced stop.
func (m *Machine) Wait(ctx context.Context) error {
	select {
	case <-m.exited:
		return m.exitErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stop asks the guest to power off (RequestStop, the framework's power
// button), waits for it up to Options.StopGrace or until ctx is done, then
// forces the machine off. The orderly way, the agent's Shutdown, is the
// caller's first step (app/sandbox); Stop is what follows it. When the
// framework does not confirm the forced stop within forceStopWait, the
// machine may still run: it ends failed, not stopped, and Stop returns
// why.
func (m *Machine) Stop(ctx context.Context) error {
	m.mu.Lock()
	started := m.started
	m.mu.Unlock()
	if !started {
		m.finish(nil)
		return nil
	}
	select {
	case <-m.exited:
		return nil
	default:
	}
	m.advance(vm.StateStopping)
	if m.vm.CanRequestStop() {
		if _, err := m.vm.RequestStop(); err != nil {
			m.log.Debug("request stop", "err", err)
		}
	}
	grace := time.NewTimer(m.opts.stopGrace())
	defer grace.Stop()
	select {
	case <-m.exited:
		return nil
	case <-grace.C:
	case <-ctx.Done():
	}
	m.log.Info("guest did not power off; stopping the machine")
	m.forceStop()
	select {
	case <-m.exited:
		return nil
	case <-time.After(forceStopWait):
	}
	err := fmt.Errorf("vz: stop: %w within %s of a forced stop (its state: %s); it may still be running: quit Airlock to end it",
		errStopUnconfirmed, forceStopWait, m.vm.State())
	m.finish(err)
	return err
}

// forceStop stops the machine without asking the guest.
func (m *Machine) forceStop() {
	if !m.vm.CanStop() {
		return
	}
	if err := m.vm.Stop(); err != nil {
		m.log.Warn("stop", "err", err)
	}
}

// finish records why the machine ended, closes its listeners and moves it
// to its final state, once.
func (m *Machine) finish(why error) {
	m.cleanOnce.Do(func() {
		m.mu.Lock()
		m.exitErr = why
		m.ended = true
		ls := make([]*listener, 0, len(m.listeners))
		for _, l := range m.listeners {
			ls = append(ls, l)
		}
		m.mu.Unlock()
		for _, l := range ls {
			l.Close()
		}
		if why != nil {
			m.log.Warn("machine ended", "err", why)
			m.Set(vm.StateFailed)
		} else {
			m.Set(vm.StateStopped)
		}
		close(m.exited)
	})
}

// Dial opens a stream to a port the guest listens on, through the
// virtio-socket device.
func (m *Machine) Dial(ctx context.Context, port uint32) (net.Conn, error) {
	switch s := m.State(); s {
	case vm.StateStarting, vm.StateRunning:
	default:
		return nil, fmt.Errorf("vz: dial guest port %d: %w (%s)", port, vm.ErrNotRunning, s)
	}
	type result struct {
		c   *vz.VirtioSocketConnection
		err error
	}
	ch := make(chan result, 1)
	go func() {
		c, err := m.sock.Connect(port)
		ch <- result{c, err}
	}()
	select {
	case r := <-ch:
		switch {
		case r.err != nil && refused(r.err):
			return nil, fmt.Errorf("vz: dial guest port %d: %w: %w", port, vm.ErrConnRefused, r.err)
		case r.err != nil:
			return nil, fmt.Errorf("vz: dial guest port %d: %w", port, r.err)
		}
		return r.c, nil
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.c != nil {
				r.c.Close()
			}
		}()
		return nil, fmt.Errorf("vz: dial guest port %d: %w", port, ctx.Err())
	}
}

// Listen accepts streams the guest opens to a host port. It works from New
// on (see Machine).
func (m *Machine) Listen(port uint32) (net.Listener, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ended {
		return nil, fmt.Errorf("vz: listen on port %d: %w", port, vm.ErrNotRunning)
	}
	if m.listeners[port] != nil {
		return nil, fmt.Errorf("vz: listen on port %d: %w", port, vm.ErrPortInUse)
	}
	vl, err := m.sock.Listen(port)
	if err != nil {
		return nil, fmt.Errorf("vz: listen on port %d: %w", port, err)
	}
	var l *listener
	l = newListener(vl, func() {
		m.mu.Lock()
		if m.listeners[port] == l {
			delete(m.listeners, port)
		}
		m.mu.Unlock()
	})
	m.listeners[port] = l
	return l, nil
}

// Info describes the machine. The VM runs in this process (the framework's
// own XPC helper does the work), so there is no PID to report.
func (m *Machine) Info() vm.Info {
	i := vm.Info{Backend: "vz", Accelerator: "hvf", Transport: string(api.TransportVsock), ConsoleLog: m.desc.Console.Path}
	if m.desc.Share != nil {
		i.Share = string(api.ShareVirtiofs)
	}
	return i
}
