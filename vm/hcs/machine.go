package hcs

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/guest/api"
	"github.com/airlock-sandbox/airlock/vm"
)

// Sockets is how the app reaches the guest and the VM's console. On
// Windows these are Hyper-V sockets and named pipes (sockets_windows.go);
// tests use in-memory ones.
type Sockets interface {
	// Listen accepts the guest's connections to port of VM vmID (a
	// runtime id: never the wildcard).
	Listen(vmID string, port uint32) (net.Listener, error)
	// Dial connects to port of VM vmID.
	Dial(ctx context.Context, vmID string, port uint32) (net.Conn, error)
	// ListenConsole creates the named pipe server the VM's COM1 connects to.
	ListenConsole(pipe string) (net.Listener, error)
	// UserSID is the account the app runs as; its console pipes carry it
	// in their names (ConsolePipeName).
	UserSID() string
}

// Options configure the backend beyond vm.Config.
type Options struct {
	// Service reaches airlock-vmservice; nil means the installed service
	// (Windows only).
	Service *Client
	// Sockets reaches the guest; nil means Hyper-V sockets (Windows only).
	Sockets Sockets
	// StopGrace bounds the wait for a terminated VM to be reported gone;
	// zero means 30s.
	StopGrace time.Duration
}

// Machine is a VM run by airlock-vmservice and reached over Hyper-V
// sockets. It implements vm.Machine.
type Machine struct {
	vm.StateHub
	cfg vm.Config
	opt Options
	log *slog.Logger

	mu        sync.Mutex
	started   bool
	stopping  bool
	info      VMInfo
	session   *Session
	listeners map[uint32]*lateListener
	console   net.Listener
	done      chan struct{} // closed once the VM has exited (or never ran)
	exitErr   error
	cancel    context.CancelFunc // ends the wait request
	stopMu    sync.Mutex
}

var _ vm.Machine = (*Machine)(nil)

// Limits the service enforces too; checked here first for a clear error.
const (
	MaxCPUs      = 64
	MaxMemoryMiB = 64 << 10
)

// New returns a machine for cfg. Nothing runs until Start.
func New(cfg vm.Config, opt Options) (*Machine, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("hcs: %w", err)
	}
	switch {
	case cfg.CPUs > MaxCPUs:
		return nil, fmt.Errorf("hcs: %w", errors.Join(vm.ErrInvalidConfig, fmt.Errorf("at most %d CPUs", MaxCPUs)))
	case cfg.MemoryMiB > MaxMemoryMiB:
		return nil, fmt.Errorf("hcs: %w", errors.Join(vm.ErrInvalidConfig, fmt.Errorf("at most %d MiB of memory", MaxMemoryMiB)))
	}
	for _, d := range cfg.Disks {
		if d.Format != vm.DiskRawVHD {
			return nil, fmt.Errorf("hcs: %w", errors.Join(vm.ErrInvalidConfig, fmt.Errorf("disk %s is %q: Hyper-V attaches only VHD files (%q)", d.Path, d.Format, vm.DiskRawVHD)))
		}
	}
	if err := platformDefaults(&opt); err != nil {
		return nil, err
	}
	if opt.StopGrace == 0 {
		opt.StopGrace = 30 * time.Second
	}
	return &Machine{
		cfg: cfg, opt: opt, log: cfg.Log().With("backend", "hcs"),
		listeners: make(map[uint32]*lateListener),
		done:      make(chan struct{}),
	}, nil
}

// Start asks the service to create the VM, binds the listeners to its
// runtime id, then has the service start it and add the workspace.
func (m *Machine) Start(ctx context.Context) (err error) {
	m.mu.Lock()
	if m.started {
		m.mu.Unlock()
		return vm.ErrAlreadyStarted
	}
	m.started = true
	m.mu.Unlock()
	m.Set(vm.StateStarting)
	defer func() {
		if err != nil {
			m.fail(err)
		}
	}()

	req := CreateRequest{
		Kernel: m.cfg.Kernel, Initrd: m.cfg.Initrd, Cmdline: m.cfg.Cmdline,
		CPUs: m.cfg.CPUs, MemoryMiB: m.cfg.MemoryMiB,
	}
	for _, d := range m.cfg.Disks {
		req.Disks = append(req.Disks, DiskRequest{Path: d.Path, ReadOnly: d.ReadOnly})
	}
	if m.cfg.Share != nil {
		req.Share = &ShareRequest{Path: m.cfg.Share.HostPath, ReadOnly: m.cfg.Share.ReadOnly}
	}
	if m.cfg.ConsoleLog != "" {
		if req.ConsolePipe, err = m.listenConsole(); err != nil {
			return err
		}
	}
	sess, info, err := m.opt.Service.Create(ctx, req)
	if err != nil {
		return err
	}
	m.mu.Lock()
	m.session, m.info = sess, info
	stopping := m.stopping
	m.mu.Unlock()
	if stopping {
		return errors.New("hcs: stopped while starting")
	}
	m.log.Debug("created", "id", info.ID, "runtime_id", info.RuntimeID)

	// Bind before start: the guest dials PortReady as soon as it boots.
	if err := m.bindListeners(); err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(context.Background())
	m.mu.Lock()
	m.cancel = cancel
	m.mu.Unlock()
	waitReady := make(chan struct{})
	go m.watch(wctx, info.ID, waitReady)
	<-waitReady

	if err := sess.Start(ctx); err != nil {
		return err
	}
	m.Set(vm.StateRunning)
	return nil
}

// listenConsole creates the console pipe and copies what COM1 sends to
// the console log. Hyper-V connects to an existing pipe server at start,
// so no early boot output is lost.
func (m *Machine) listenConsole() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("hcs: console pipe name: %w", err)
	}
	name := ConsolePipeName(m.opt.Sockets.UserSID(), b)
	l, err := m.opt.Sockets.ListenConsole(name)
	if err != nil {
		return "", fmt.Errorf("hcs: console pipe: %w", err)
	}
	f, err := os.OpenFile(m.cfg.ConsoleLog, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		l.Close()
		return "", fmt.Errorf("hcs: console log: %w", err)
	}
	m.mu.Lock()
	m.console = l
	m.mu.Unlock()
	go func() {
		defer f.Close()
		c, err := l.Accept()
		l.Close() // one connection: the VM's
		if err != nil {
			return
		}
		defer c.Close()
		if _, err := io.Copy(f, c); err != nil && !errors.Is(err, net.ErrClosed) {
			m.log.Debug("console copy ended", "err", err)
		}
	}()
	return name, nil
}

func (m *Machine) bindListeners() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for port, l := range m.listeners {
		inner, err := m.opt.Sockets.Listen(m.info.RuntimeID, port)
		if err != nil {
			return fmt.Errorf("hcs: listen on port %d: %w", port, err)
		}
		l.bind(inner)
	}
	return nil
}

// watch waits for the VM's exit on its own connection and records it.
func (m *Machine) watch(ctx context.Context, id string, ready chan<- struct{}) {
	type result struct {
		exit Exit
		err  error
	}
	res := make(chan result, 1)
	go func() {
		e, err := m.opt.Service.Wait(ctx, id)
		res <- result{e, err}
	}()
	close(ready)
	r := <-res
	m.exited(r.exit, r.err)
}

// exited records how the VM ended, once.
func (m *Machine) exited(e Exit, waitErr error) {
	m.mu.Lock()
	select {
	case <-m.done:
		m.mu.Unlock()
		return
	default:
	}
	stopping := m.stopping
	var err error
	switch {
	case waitErr != nil && stopping:
	case waitErr != nil:
		err = fmt.Errorf("hcs: lost track of the VM: %w", waitErr)
	default:
		err = m.exitError(e, stopping)
	}
	m.exitErr = err
	close(m.done)
	for _, l := range m.listeners {
		l.closeInner()
	}
	m.mu.Unlock()
	if err != nil && !stopping {
		m.log.Warn("VM exited", "err", err)
		m.Set(vm.StateFailed)
		return
	}
	m.Set(vm.StateStopped)
}

// exitError describes e: nil for an orderly power-off, the guest's own
// account when it reported a failed boot, HCS's otherwise.
func (m *Machine) exitError(e Exit, stopping bool) error {
	if m.cfg.ConsoleLog != "" {
		if err := GuestFailure(tailFile(m.cfg.ConsoleLog, 8192)); err != nil {
			return err
		}
	}
	if e.Graceful() || (stopping && e.Message == "") {
		return nil
	}
	return describeExit(e)
}

// describeExit describes an exit that was not an orderly power-off, with
// the diagnosis of its status (or ErrUnexpectedExit for HCS's
// "UnexpectedExit") when there is one.
func describeExit(e Exit) error {
	msg := e.Type
	if e.Message != "" {
		msg = e.Message
	}
	text := "hcs: the VM exited: " + msg
	var diag error
	if e.Status != 0 {
		hr := HRESULT(uint32(e.Status))
		text += " (" + hr.String() + ")"
		diag = diagnosis("", hr)
	}
	if diag == nil && e.Type == "UnexpectedExit" {
		diag = ErrUnexpectedExit
	}
	if diag != nil {
		return fmt.Errorf("%s: %w", text, diag)
	}
	return errors.New(text)
}

// fail cleans up after a failed Start.
func (m *Machine) fail(err error) {
	m.log.Debug("start failed", "err", err)
	m.mu.Lock()
	m.stopping = true
	select {
	case <-m.done:
	default:
		m.exitErr = err
	}
	m.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), m.opt.StopGrace)
	defer cancel()
	m.terminate(ctx)
	m.release()
	m.Set(vm.StateFailed)
}

// Wait blocks until the VM has exited or ctx is done.
func (m *Machine) Wait(ctx context.Context) error {
	m.mu.Lock()
	started := m.started
	m.mu.Unlock()
	if !started {
		return vm.ErrNotRunning
	}
	select {
	case <-m.done:
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.exitErr
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stop waits for the VM to power off (the caller has asked the guest
// agent to) until ctx is done, then has the service terminate it. It
// returns once the VM is gone and every resource is released.
func (m *Machine) Stop(ctx context.Context) error {
	m.stopMu.Lock()
	defer m.stopMu.Unlock()
	m.mu.Lock()
	started := m.started
	m.started = true // a later Start fails
	m.stopping = true
	m.mu.Unlock()
	if !started {
		m.release()
		m.Set(vm.StateStopped)
		return nil
	}
	if m.State() != vm.StateStarting {
		m.Set(vm.StateStopping)
	}
	var err error
	select {
	case <-m.done:
	case <-ctx.Done():
		tctx, cancel := context.WithTimeout(context.Background(), m.opt.StopGrace)
		err = m.terminate(tctx)
		cancel()
	}
	m.release()
	if err != nil {
		return err
	}
	m.Set(vm.StateStopped)
	return nil
}

// terminate has the service end the VM and waits for the exit.
func (m *Machine) terminate(ctx context.Context) error {
	m.mu.Lock()
	sess := m.session
	m.mu.Unlock()
	if sess == nil {
		return nil
	}
	select {
	case <-m.done:
		return nil
	default:
	}
	err := sess.Stop(ctx)
	if err != nil {
		// Closing the session makes the service terminate the VM too.
		m.log.Warn("terminate", "err", err)
		sess.Close()
	}
	select {
	case <-m.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("hcs: the VM did not stop: %w", errors.Join(err, ctx.Err()))
	}
}

// release closes everything the machine holds; the service terminates a
// VM whose session closes.
func (m *Machine) release() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.session != nil {
		m.session.Close()
	}
	if m.cancel != nil {
		m.cancel()
	}
	if m.console != nil {
		m.console.Close()
	}
	for _, l := range m.listeners {
		l.closeInner()
	}
	select {
	case <-m.done:
	default:
		close(m.done)
	}
}

// Dial connects to a port the guest listens on.
func (m *Machine) Dial(ctx context.Context, port uint32) (net.Conn, error) {
	m.mu.Lock()
	id := m.info.RuntimeID
	m.mu.Unlock()
	if id == "" || m.State() != vm.StateRunning {
		return nil, vm.ErrNotRunning
	}
	c, err := m.opt.Sockets.Dial(ctx, id, port)
	if err != nil {
		return nil, fmt.Errorf("hcs: dial guest port %d: %w", port, err)
	}
	return c, nil
}

// Listen accepts the guest's connections to port. Before Start the
// listener is bound once the VM's runtime id is known.
func (m *Machine) Listen(port uint32) (net.Listener, error) {
	if port == Plan9Port {
		return nil, fmt.Errorf("hcs: port %d is the workspace's Plan9 server: %w", port, vm.ErrPortInUse)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.listeners[port]; ok {
		return nil, fmt.Errorf("hcs: port %d: %w", port, vm.ErrPortInUse)
	}
	select {
	case <-m.done:
		return nil, vm.ErrNotRunning
	default:
	}
	l := newLateListener(port, func() { m.forget(port) })
	if m.info.RuntimeID != "" {
		inner, err := m.opt.Sockets.Listen(m.info.RuntimeID, port)
		if err != nil {
			return nil, fmt.Errorf("hcs: listen on port %d: %w", port, err)
		}
		l.bind(inner)
	}
	m.listeners[port] = l
	return l, nil
}

func (m *Machine) forget(port uint32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.listeners, port)
}

// Info describes the machine.
func (m *Machine) Info() vm.Info {
	i := vm.Info{Backend: "hcs", Accelerator: "hyperv", Transport: string(api.TransportHVSock), ConsoleLog: m.cfg.ConsoleLog}
	if m.cfg.Share != nil {
		i.Share = string(api.Share9PVsock)
	}
	return i
}

// RuntimeID is the VM id its Hyper-V sockets are bound to ("" before Start).
func (m *Machine) RuntimeID() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.info.RuntimeID
}

func tailFile(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	b, _ := io.ReadAll(io.NewSectionReader(f, max(fi.Size()-n, 0), n))
	return string(b)
}
