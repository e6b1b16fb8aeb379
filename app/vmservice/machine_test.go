package vmservice

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/guest/api"
	"github.com/airlock-sandbox/airlock/guest/console"
	"github.com/airlock-sandbox/airlock/vm"
	"github.com/airlock-sandbox/airlock/vm/hcs"
)

// The app-side hcs.Machine against the real service logic, a fake HCS and
// in-memory sockets: the whole Windows flow but the DLL and the kernel.

// memNet stands in for Hyper-V sockets and pipes: listeners keyed by VM
// id and port (so binding to the wrong VM is caught) and by pipe name.
type memNet struct {
	mu    sync.Mutex
	host  map[string]*memListener // host listeners the guest dials
	guest map[string]*memListener // guest listeners the host dials
}

func newMemNet() *memNet {
	return &memNet{host: map[string]*memListener{}, guest: map[string]*memListener{}}
}

func key(vmID string, port uint32) string { return fmt.Sprintf("%s:%d", vmID, port) }

func (n *memNet) listen(m map[string]*memListener, k string) (net.Listener, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := m[k]; ok {
		return nil, vm.ErrPortInUse
	}
	l := &memListener{conns: make(chan net.Conn), done: make(chan struct{})}
	l.close = func() {
		n.mu.Lock()
		delete(m, k)
		n.mu.Unlock()
	}
	m[k] = l
	return l, nil
}

func (n *memNet) dial(ctx context.Context, m map[string]*memListener, k string) (net.Conn, error) {
	n.mu.Lock()
	l := m[k]
	n.mu.Unlock()
	if l == nil {
		return nil, vm.ErrConnRefused
	}
	a, b := net.Pipe()
	select {
	case l.conns <- b:
		return a, nil
	case <-l.done:
		return nil, vm.ErrConnRefused
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (n *memNet) Listen(vmID string, port uint32) (net.Listener, error) {
	return n.listen(n.host, key(vmID, port))
}

func (n *memNet) Dial(ctx context.Context, vmID string, port uint32) (net.Conn, error) {
	return n.dial(ctx, n.guest, key(vmID, port))
}

func (n *memNet) ListenConsole(pipe string) (net.Listener, error) { return n.listen(n.host, pipe) }

func (n *memNet) UserSID() string { return alice }

// guestDial is the guest connecting to the host.
func (n *memNet) guestDial(vmID string, port uint32) (net.Conn, error) {
	return n.dial(context.Background(), n.host, key(vmID, port))
}

type memListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
	close func()
}

func (l *memListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *memListener) Close() error {
	l.once.Do(func() { close(l.done); l.close() })
	return nil
}

func (l *memListener) Addr() net.Addr { return &net.UnixAddr{Name: "mem", Net: "mem"} }

type machineRig struct {
	hs  *harness
	net *memNet
	m   *hcs.Machine
	cfg vm.Config
}

func newMachineRig(t *testing.T, edit func(*vm.Config)) *machineRig {
	t.Helper()
	hs := newHarness(t)
	mn := newMemNet()
	cfg := vm.Config{
		Kernel: kernel, Initrd: initrd, Cmdline: []string{"airlock.uid=1000"},
		CPUs: 2, MemoryMiB: 1024, Dir: t.TempDir(),
		Share:      &vm.Share{HostPath: project},
		ConsoleLog: filepath.Join(t.TempDir(), "console.log"),
	}
	if edit != nil {
		edit(&cfg)
	}
	m, err := hcs.New(cfg, hcs.Options{Service: hs.client(aliceCaller()), Sockets: mn, StopGrace: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Stop(context.Background()) })
	return &machineRig{hs: hs, net: mn, m: m, cfg: cfg}
}

func (r *machineRig) system(t *testing.T) *fakeSystem {
	t.Helper()
	r.hs.h.mu.Lock()
	defer r.hs.h.mu.Unlock()
	for _, s := range r.hs.h.systems {
		return s
	}
	t.Fatal("no VM was created")
	return nil
}

// console plays COM1: it connects to the pipe named in the document and
// writes lines.
func (r *machineRig) console(t *testing.T, lines string) {
	t.Helper()
	pipe := r.hs.h.docs[0].VirtualMachine.Devices.ComPorts["0"].NamedPipe
	c, err := r.net.dial(context.Background(), r.net.host, pipe)
	if err != nil {
		t.Fatalf("COM1 cannot reach %s: %v", pipe, err)
	}
	if _, err := io.WriteString(c, lines); err != nil {
		t.Fatal(err)
	}
	c.Close()
}

func TestMachineBootReadyAgentPowerOff(t *testing.T) {
	r := newMachineRig(t, nil)
	ctx := context.Background()
	ready, err := r.m.Listen(api.PortReady) // before Start, as app/sandbox does
	if err != nil {
		t.Fatal(err)
	}
	if err := r.m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if r.m.State() != vm.StateRunning {
		t.Fatalf("state %s", r.m.State())
	}
	sys := r.system(t)
	if r.m.RuntimeID() != sys.runtimeID {
		t.Fatalf("runtime id %q, VM has %q", r.m.RuntimeID(), sys.runtimeID)
	}
	if len(sys.modifies) != 1 {
		t.Fatal("workspace not shared")
	}
	if cl := r.hs.h.docs[0].VirtualMachine.Chipset.LinuxKernelDirect.KernelCmdLine; !strings.HasSuffix(cl, "airlock.share_port=564 airlock.uid=1000") {
		t.Errorf("cmdline %q", cl)
	}

	// The guest boots: console output, then readiness on the VM's own id.
	r.console(t, "Linux version 6.1\nairlock-guest: agent ready\n")
	go func() {
		c, err := r.net.guestDial(sys.runtimeID, api.PortReady)
		if err != nil {
			t.Error(err)
			return
		}
		api.WriteReady(c, api.Ready{AgentVersion: "test"})
		c.Close()
	}()
	c, err := ready.Accept()
	if err != nil {
		t.Fatal(err)
	}
	got, err := api.ReadReady(c)
	if err != nil || got.AgentVersion != "test" {
		t.Fatalf("ready %+v, %v", got, err)
	}
	if _, err := r.net.guestDial("00000000-0000-0000-0000-000000000000", api.PortReady); err == nil {
		t.Error("a listener answers on the wildcard VM id")
	}

	// The host dials the agent.
	agent, err := r.net.listen(r.net.guest, key(sys.runtimeID, api.PortAgent))
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		c, err := agent.Accept()
		if err == nil {
			io.WriteString(c, "hello")
			c.Close()
		}
	}()
	ac, err := r.m.Dial(ctx, api.PortAgent)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(ac); string(b) != "hello" {
		t.Errorf("agent said %q", b)
	}
	if _, err := r.m.Dial(ctx, 4242); !errors.Is(err, vm.ErrConnRefused) {
		t.Errorf("dial to a closed port = %v", err)
	}

	// The agent powers off (app/sandbox asked it to).
	sys.powerOff(hcs.Exit{Type: "GracefulExit"})
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := r.m.Wait(wctx); err != nil {
		t.Fatalf("Wait = %v", err)
	}
	if r.m.State() != vm.StateStopped {
		t.Errorf("state %s", r.m.State())
	}
	if _, err := ready.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("listener after exit: %v", err)
	}
	if err := r.m.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the service to release the VM", func() bool { return sys.isClosed() && r.hs.h.openGrants() == 0 })
	log, _ := os.ReadFile(r.cfg.ConsoleLog)
	if !bytes.Contains(log, []byte("agent ready")) {
		t.Errorf("console log %q", log)
	}
}

func TestMachineStopTerminates(t *testing.T) {
	r := newMachineRig(t, func(c *vm.Config) { c.Share = nil })
	if err := r.m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	sys := r.system(t)
	if len(sys.modifies) != 0 {
		t.Error("a share was added without a workspace")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the agent did not power off in time
	if err := r.m.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if r.m.State() != vm.StateStopped || sys.ExitStatus().Type != "ForcedExit" {
		t.Fatalf("state %s, exit %+v", r.m.State(), sys.ExitStatus())
	}
	if err := r.m.Start(context.Background()); !errors.Is(err, vm.ErrAlreadyStarted) {
		t.Errorf("Start after Stop = %v", err)
	}
}

func TestMachinePlan9MountFailure(t *testing.T) {
	r := newMachineRig(t, nil)
	if err := r.m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	console.NewLogger(&b, "", false).Error("fatal: powering off", "err", errors.New("workspace: mount 9p on /workspace: connection reset by peer"))
	r.console(t, "Linux version 6.1\n"+b.String())
	eventually(t, "the console log", func() bool {
		l, _ := os.ReadFile(r.cfg.ConsoleLog)
		return bytes.Contains(l, []byte("powering off"))
	})
	r.system(t).powerOff(hcs.Exit{Type: "GracefulExit"})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.m.Wait(ctx); !errors.Is(err, hcs.ErrPlan9Mount) {
		t.Fatalf("Wait = %v", err)
	}
	if r.m.State() != vm.StateFailed {
		t.Errorf("state %s", r.m.State())
	}
}

func TestMachineCreateRefused(t *testing.T) {
	r := newMachineRig(t, func(c *vm.Config) { c.Share.HostPath = `C:\Users\bob\code` })
	l, err := r.m.Listen(api.PortReady)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.m.Start(context.Background()); !errors.Is(err, hcs.ErrRefused) {
		t.Fatalf("Start = %v", err)
	}
	if r.m.State() != vm.StateFailed {
		t.Errorf("state %s", r.m.State())
	}
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("listener after a failed start: %v", err)
	}
}

func TestMachineUnexpectedExit(t *testing.T) {
	r := newMachineRig(t, func(c *vm.Config) { c.ConsoleLog = "" })
	if err := r.m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	hr := uint32(0x80370106) // HCS_E_UNEXPECTED_EXIT
	r.system(t).powerOff(hcs.Exit{Type: "UnexpectedExit", Status: int32(hr)})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := r.m.Wait(ctx)
	if err == nil || !strings.Contains(err.Error(), "UnexpectedExit") || !strings.Contains(err.Error(), "0x80370106") {
		t.Fatalf("Wait = %v", err)
	}
	if !errors.Is(err, hcs.ErrUnexpectedExit) {
		t.Errorf("no diagnosis: %v", err)
	}
	if r.m.State() != vm.StateFailed {
		t.Errorf("state %s", r.m.State())
	}
}
