// Package vmtest provides a fake vm.Machine whose transport is in memory
// (net.Pipe), so host code can be tested without a hypervisor. The test
// plays the guest through a Guest handed to the Boot function.
package vmtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"

	"github.com/airlock-sandbox/airlock/guest/api"
	"github.com/airlock-sandbox/airlock/guest/api/execwire"
	"github.com/airlock-sandbox/airlock/vm"
)

// Machine is a fake vm.Machine.
type Machine struct {
	vm.StateHub
	cfg  vm.Config
	boot func(ctx context.Context, g *Guest) error

	mu       sync.Mutex
	host     map[uint32]*listener // host-side listeners (guest dials them)
	guest    map[uint32]*listener // guest-side listeners (host dials them)
	started  bool
	done     chan struct{}
	exitErr  error
	stopBoot context.CancelFunc
	// The guest played a start from a saved state that failed
	// (Guest.FailRestore).
	restored, failed bool
}

// The fake's guest is the test's code on this host, and a test may play a
// machine started from a saved state.
var (
	_ vm.HostGuest = (*Machine)(nil)
	_ vm.Restorer  = (*Machine)(nil)
)

// New returns a fake machine; Start runs boot in its own goroutine as the
// guest, and the machine stops when boot returns (nil = orderly power-off).
func New(cfg vm.Config, boot func(ctx context.Context, g *Guest) error) *Machine {
	return &Machine{cfg: cfg, boot: boot, host: map[uint32]*listener{}, guest: map[uint32]*listener{}, done: make(chan struct{})}
}

// Config is the configuration the machine was created with.
func (m *Machine) Config() vm.Config { return m.cfg }

// Start implements vm.Machine.
func (m *Machine) Start(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.started {
		return vm.ErrAlreadyStarted
	}
	m.started = true
	m.Set(vm.StateStarting)
	bctx, cancel := context.WithCancel(context.Background())
	m.stopBoot = cancel
	m.Set(vm.StateRunning)
	go func() {
		err := m.boot(bctx, &Guest{m: m})
		m.finish(err)
	}()
	return nil
}

func (m *Machine) finish(err error) {
	m.mu.Lock()
	select {
	case <-m.done:
		m.mu.Unlock()
		return
	default:
	}
	m.exitErr = err
	var ls []*listener
	for _, l := range m.guest {
		ls = append(ls, l)
	}
	close(m.done)
	m.mu.Unlock()
	for _, l := range ls {
		l.close()
	}
	if err != nil {
		m.Set(vm.StateFailed)
	} else {
		m.Set(vm.StateStopped)
	}
}

// Wait implements vm.Machine.
func (m *Machine) Wait(ctx context.Context) error {
	select {
	case <-m.done:
		return m.exitErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stop implements vm.Machine: it cancels the guest's context and waits for
// Boot to return, or forces the machine off when ctx is done.
func (m *Machine) Stop(ctx context.Context) error {
	m.mu.Lock()
	started, cancel := m.started, m.stopBoot
	m.mu.Unlock()
	if !started {
		m.finish(nil)
		return nil
	}
	m.Set(vm.StateStopping)
	cancel()
	select {
	case <-m.done:
	case <-ctx.Done():
		m.finish(errors.New("vmtest: forced off"))
	}
	return nil
}

// GuestIsHost implements vm.HostGuest: the guest is the test's code, in
// this process.
func (m *Machine) GuestIsHost() bool { return true }

// Restored implements vm.Restorer: whether the guest played a start from
// a saved state (Guest.FailRestore).
func (m *Machine) Restored() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.restored
}

// RestoreFailed implements vm.Restorer: whether the guest played a saved
// state that failed (Guest.FailRestore).
func (m *Machine) RestoreFailed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.failed
}

// Dial implements vm.Machine.
func (m *Machine) Dial(ctx context.Context, port uint32) (net.Conn, error) {
	return m.dial(ctx, m.guest, true, port)
}

// Listen implements vm.Machine.
func (m *Machine) Listen(port uint32) (net.Listener, error) { return m.listen(m.host, port) }

// Info implements vm.Machine.
func (m *Machine) Info() vm.Info {
	return vm.Info{Backend: "vmtest", Accelerator: "none", Transport: "pipe", ConsoleLog: m.cfg.ConsoleLog}
}

func (m *Machine) dial(ctx context.Context, side map[uint32]*listener, toGuest bool, port uint32) (net.Conn, error) {
	m.mu.Lock()
	l, ok := side[port]
	running := m.started
	select {
	case <-m.done:
		running = false
	default:
	}
	m.mu.Unlock()
	if !running && toGuest {
		return nil, vm.ErrNotRunning
	}
	if !ok {
		return nil, fmt.Errorf("port %d: %w", port, vm.ErrConnRefused)
	}
	a, b := net.Pipe()
	select {
	case l.conns <- b:
		return a, nil
	case <-l.closed:
		return nil, fmt.Errorf("port %d: %w", port, vm.ErrConnRefused)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (m *Machine) listen(side map[uint32]*listener, port uint32) (net.Listener, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := side[port]; ok {
		return nil, fmt.Errorf("port %d: %w", port, vm.ErrPortInUse)
	}
	l := &listener{port: port, conns: make(chan net.Conn), closed: make(chan struct{})}
	l.onClose = func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if side[port] == l {
			delete(side, port)
		}
	}
	side[port] = l
	return l, nil
}

// Guest is the guest's side of a fake machine's transport.
type Guest struct{ m *Machine }

// Listen accepts streams the host dials to port.
func (g *Guest) Listen(port uint32) (net.Listener, error) { return g.m.listen(g.m.guest, port) }

// FailRestore makes the machine one whose saved state failed
// (vm.Restorer), and returns err for Boot to return: the machine ends
// with it.
func (g *Guest) FailRestore(err error) error {
	g.m.mu.Lock()
	g.m.restored, g.m.failed = true, true
	g.m.mu.Unlock()
	return err
}

// Dial opens a stream to a host port.
func (g *Guest) Dial(ctx context.Context, port uint32) (net.Conn, error) {
	return g.m.dial(ctx, g.m.host, false, port)
}

type listener struct {
	port    uint32
	conns   chan net.Conn
	closed  chan struct{}
	once    sync.Once
	onClose func()
}

func (l *listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *listener) close() { l.once.Do(func() { close(l.closed); l.onClose() }) }

func (l *listener) Close() error { l.close(); return nil }

func (l *listener) Addr() net.Addr { return addr(l.port) }

type addr uint32

func (a addr) Network() string { return "vmtest" }
func (a addr) String() string  { return fmt.Sprintf("vmtest:%d", uint32(a)) }

// ServeAgent plays a guest's start-up the way airlock-guest does: it answers
// the agent calls on the agent port with agent and serves exec, when not nil, for each task stream on
// the exec port, signals readiness with ready, and runs until off is closed
// (an orderly power-off, nil) or the machine is stopped (ctx ends: ctx's
// error).
func (g *Guest) ServeAgent(ctx context.Context, agent execwire.Agent, exec func(*execwire.Stream) error, ready api.Ready, off <-chan struct{}) error {
	l, err := g.Listen(api.PortAgent)
	if err != nil {
		return err
	}
	defer l.Close()
	go execwire.ServeAgent(l, agent, nil)
	if exec != nil {
		el, err := g.Listen(api.PortExec)
		if err != nil {
			return err
		}
		defer el.Close()
		go execwire.Serve(el, exec)
	}
	c, err := g.Dial(ctx, api.PortReady)
	if err != nil {
		return err
	}
	api.WriteReady(c, ready)
	c.Close()
	select {
	case <-off:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
