package qemu

import (
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/vm"
)

// fakeAddr carries a context id in its string.
type fakeAddr uint32

func (fakeAddr) Network() string  { return "vsock" }
func (a fakeAddr) String() string { return "fake" }

type fakeConn struct {
	net.Conn
	from   uint32
	closed chan struct{}
	once   sync.Once
}

func (c *fakeConn) RemoteAddr() net.Addr { return fakeAddr(c.from) }
func (c *fakeConn) Close() error         { c.once.Do(func() { close(c.closed) }); return nil }

type fakeListener struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func (l *fakeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}
func (l *fakeListener) Close() error   { l.once.Do(func() { close(l.closed) }); return nil }
func (l *fakeListener) Addr() net.Addr { return fakeAddr(2) }

func TestPortTableDispatchesByCID(t *testing.T) {
	opened := map[uint32]*fakeListener{}
	tbl := &portTable{
		ports: map[uint32]*sharedPort{},
		listen: func(port uint32) (net.Listener, error) {
			if opened[port] != nil {
				select {
				case <-opened[port].closed:
				default:
					return nil, errors.New("listened twice")
				}
			}
			l := &fakeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
			opened[port] = l
			return l, nil
		},
		cidOf: func(a net.Addr) (uint32, bool) { f, ok := a.(fakeAddr); return uint32(f), ok },
	}
	a, err := tbl.register(3, 1025)
	if err != nil {
		t.Fatal(err)
	}
	b, err := tbl.register(4, 1025)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tbl.register(3, 1025); !errors.Is(err, vm.ErrPortInUse) {
		t.Fatalf("second listener for one guest: %v", err)
	}
	send := func(from uint32) *fakeConn {
		c := &fakeConn{from: from, closed: make(chan struct{})}
		opened[1025].conns <- c
		return c
	}
	accept := func(l net.Listener) net.Conn {
		ch := make(chan net.Conn, 1)
		go func() { c, _ := l.Accept(); ch <- c }()
		select {
		case c := <-ch:
			return c
		case <-time.After(2 * time.Second):
			t.Fatal("no connection")
			return nil
		}
	}
	ca := send(3)
	if got := accept(a); got != ca {
		t.Error("guest 3's connection went elsewhere")
	}
	cb := send(4)
	if got := accept(b); got != cb {
		t.Error("guest 4's connection went elsewhere")
	}
	// Another VM, or the host itself: closed, never delivered.
	stranger := send(99)
	select {
	case <-stranger.closed:
	case <-time.After(2 * time.Second):
		t.Fatal("connection from an unknown cid was not closed")
	}
	// The host socket stays while a machine listens, and closes after.
	a.Close()
	select {
	case <-opened[1025].closed:
		t.Fatal("shared socket closed while guest 4 still listens")
	default:
	}
	b.Close()
	select {
	case <-opened[1025].closed:
	case <-time.After(time.Second):
		t.Fatal("shared socket left open")
	}
	if _, err := a.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Close: %v", err)
	}
	// The port can be listened on again.
	c, err := tbl.register(3, 1025)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}
