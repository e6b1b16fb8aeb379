package qemu

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"

	"github.com/mdlayher/vsock"

	"github.com/airlock-sandbox/airlock/vm"
)

// dialVsock connects to a guest port over AF_VSOCK.
func dialVsock(ctx context.Context, cid, port uint32) (net.Conn, error) {
	c, err := vsock.DialContext(ctx, cid, port, nil)
	if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) {
		return nil, fmt.Errorf("qemu: dial guest port %d: %w: %w", port, vm.ErrConnRefused, err)
	}
	if err != nil {
		return nil, fmt.Errorf("qemu: dial guest port %d: %w", port, err)
	}
	return c, nil
}

// Host vsock ports are shared by every VM on the host, and one process may
// run several machines, so one socket per port is listened on for the
// whole process and its connections are handed to the machine whose guest
// made them, by the peer's context id. A connection from any other context
// id is closed.
var hostPorts = &portTable{ports: map[uint32]*sharedPort{}, listen: func(port uint32) (net.Listener, error) {
	return vsock.ListenContextID(vsock.Host, port, nil)
}}

type portTable struct {
	mu     sync.Mutex
	ports  map[uint32]*sharedPort
	listen func(port uint32) (net.Listener, error)
	// cidOf reads the peer's context id; nil means vsock.Addr.
	cidOf func(net.Addr) (uint32, bool)
}

// sharedPort is one host socket and the machines listening on it.
type sharedPort struct {
	ln   net.Listener
	byID map[uint32]*cidListener
}

func (t *portTable) peerCID(a net.Addr) (uint32, bool) {
	if t.cidOf != nil {
		return t.cidOf(a)
	}
	va, ok := a.(*vsock.Addr)
	if !ok {
		return 0, false
	}
	return va.ContextID, true
}

// register adds a listener for guest cid on port.
func (t *portTable) register(cid, port uint32) (*cidListener, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	sp := t.ports[port]
	if sp == nil {
		ln, err := t.listen(port)
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("qemu: listen on vsock port %d: %w: %w", port, vm.ErrPortInUse, err)
		}
		if err != nil {
			return nil, fmt.Errorf("qemu: listen on vsock port %d: %w", port, err)
		}
		sp = &sharedPort{ln: ln, byID: map[uint32]*cidListener{}}
		t.ports[port] = sp
		go t.serve(port, sp)
	}
	if _, ok := sp.byID[cid]; ok {
		return nil, fmt.Errorf("qemu: listen on vsock port %d: %w", port, vm.ErrPortInUse)
	}
	l := &cidListener{t: t, cid: cid, port: port, addr: sp.ln.Addr(), conns: make(chan net.Conn, 64), done: make(chan struct{})}
	sp.byID[cid] = l
	return l, nil
}

// serve hands the port's connections to the listener of the peer's cid.
func (t *portTable) serve(port uint32, sp *sharedPort) {
	for {
		c, err := sp.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			t.mu.Lock()
			if t.ports[port] == sp {
				delete(t.ports, port)
			}
			ls := sp.byID
			sp.byID = map[uint32]*cidListener{}
			t.mu.Unlock()
			for _, l := range ls {
				l.shut()
			}
			return
		}
		cid, ok := t.peerCID(c.RemoteAddr())
		t.mu.Lock()
		l := sp.byID[cid]
		t.mu.Unlock()
		if !ok || l == nil || !l.offer(c) {
			c.Close() // another VM's guest, or a full backlog
		}
	}
}

// unregister removes l and closes the host socket once nobody listens.
func (t *portTable) unregister(l *cidListener) {
	t.mu.Lock()
	defer t.mu.Unlock()
	sp := t.ports[l.port]
	if sp == nil || sp.byID[l.cid] != l {
		return
	}
	delete(sp.byID, l.cid)
	if len(sp.byID) == 0 {
		delete(t.ports, l.port)
		sp.ln.Close()
	}
}

// cidListener is one machine's view of a shared port.
type cidListener struct {
	t         *portTable
	cid, port uint32
	addr      net.Addr
	conns     chan net.Conn
	done      chan struct{}
	once      sync.Once
}

func (l *cidListener) offer(c net.Conn) bool {
	select {
	case <-l.done:
		return false
	default:
	}
	select {
	case l.conns <- c:
		return true
	default:
		return false
	}
}

func (l *cidListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, fmt.Errorf("qemu: accept on vsock port %d: %w", l.port, net.ErrClosed)
	}
}

func (l *cidListener) shut() bool {
	first := false
	l.once.Do(func() {
		first = true
		close(l.done)
		for {
			select {
			case c := <-l.conns:
				c.Close()
			default:
				return
			}
		}
	})
	return first
}

func (l *cidListener) Close() error {
	if !l.shut() {
		return net.ErrClosed
	}
	l.t.unregister(l)
	return nil
}

func (l *cidListener) Addr() net.Addr { return l.addr }

// vsockListeners tracks one machine's listeners so they close with it.
type vsockListeners struct {
	cid uint32
	mu  sync.Mutex
	ls  map[*cidListener]struct{}
	t   *portTable
}

func newVsockListeners(cid uint32) *vsockListeners {
	return &vsockListeners{cid: cid, ls: map[*cidListener]struct{}{}, t: hostPorts}
}

func (v *vsockListeners) listen(port uint32) (net.Listener, error) {
	l, err := v.t.register(v.cid, port)
	if err != nil {
		return nil, err
	}
	v.mu.Lock()
	v.ls[l] = struct{}{}
	v.mu.Unlock()
	return l, nil
}

func (v *vsockListeners) closeAll() {
	v.mu.Lock()
	ls := v.ls
	v.ls = map[*cidListener]struct{}{}
	v.mu.Unlock()
	for l := range ls {
		l.Close()
	}
}
