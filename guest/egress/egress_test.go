package egress

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/guest/api"
	"github.com/airlock-sandbox/airlock/guest/api/egresswire"
	"github.com/airlock-sandbox/airlock/internal/leakcheck"
)

// pipeConn is one end of an in-memory, half-closable connection: two
// io.Pipes, one each way. (net.Pipe cannot half-close, and mux streams and
// vsock connections can.)
type pipeConn struct {
	r *io.PipeReader
	w *io.PipeWriter
}

func halfPipe() (a, b *pipeConn) {
	ar, bw := io.Pipe()
	br, aw := io.Pipe()
	return &pipeConn{r: ar, w: aw}, &pipeConn{r: br, w: bw}
}

func (p *pipeConn) Read(b []byte) (int, error)  { return p.r.Read(b) }
func (p *pipeConn) Write(b []byte) (int, error) { return p.w.Write(b) }
func (p *pipeConn) CloseWrite() error           { return p.w.Close() }
func (p *pipeConn) Close() error {
	p.r.Close()
	p.w.Close()
	return nil
}

// abort fails the connection: the peer's reads and writes get err.
func (p *pipeConn) abort(err error) {
	p.r.CloseWithError(err)
	p.w.CloseWithError(err)
}

func (p *pipeConn) LocalAddr() net.Addr              { return pipeAddr{} }
func (p *pipeConn) RemoteAddr() net.Addr             { return pipeAddr{} }
func (p *pipeConn) SetDeadline(time.Time) error      { return nil }
func (p *pipeConn) SetReadDeadline(time.Time) error  { return nil }
func (p *pipeConn) SetWriteDeadline(time.Time) error { return nil }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

var errRefused = errors.New("fake: connection refused")

// hostConn is the host's end of a stream, read and written as the gate
// does (egresswire.Server) over a half-closable pipe.
type hostConn struct {
	*egresswire.Conn
	pipe *pipeConn
}

func (h *hostConn) abort(err error) { h.pipe.abort(err) }

// fakeHost is the host side of the transport: a port it listens on hands
// every dialled stream to the test; other ports refuse.
type fakeHost struct {
	mu    sync.Mutex
	ports map[uint32]chan *hostConn
	dials int
}

func newFakeHost(ports ...uint32) *fakeHost {
	h := &fakeHost{ports: map[uint32]chan *hostConn{}}
	for _, p := range ports {
		h.ports[p] = make(chan *hostConn, 64)
	}
	return h
}

func (h *fakeHost) Dial(ctx context.Context, port uint32) (net.Conn, error) {
	h.mu.Lock()
	h.dials++
	ch, ok := h.ports[port]
	h.mu.Unlock()
	if !ok {
		return nil, errRefused
	}
	guest, host := halfPipe()
	select {
	case ch <- &hostConn{Conn: egresswire.Server(host), pipe: host}:
		return guest, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (h *fakeHost) accept(t *testing.T, port uint32) *hostConn {
	t.Helper()
	select {
	case c := <-h.ports[port]:
		return c
	case <-time.After(5 * time.Second):
		t.Fatalf("no stream reached host port %d", port)
		return nil
	}
}

// serve runs a Forwarder on a loopback listener forwarding to port, and
// stops it (checking that Serve returns) when the test ends.
func serve(t *testing.T, cfg Config, port uint32) (*Forwarder, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- f.Serve(ctx, l, port) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-served:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("Serve did not return after cancel")
		}
		if n := f.Active(); n != 0 {
			t.Errorf("%d connections still active after Serve returned", n)
		}
	})
	return f, l.Addr().String()
}

func dial(t *testing.T, addr string) *net.TCPConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return c.(*net.TCPConn)
}

func randomBytes(t *testing.T, n int) []byte {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// TestBytesBothWays sends a megabyte up, half-closes, then receives a
// different megabyte down, and checks both byte for byte.
func TestBytesBothWays(t *testing.T) {
	leakcheck.Goroutines(t)
	host := newFakeHost(api.PortEgressHTTP)
	_, addr := serve(t, Config{Dial: host.Dial}, api.PortEgressHTTP)
	c := dial(t, addr)

	up, down := randomBytes(t, 1<<20), randomBytes(t, 1<<20+7)
	hostGot := make(chan []byte, 1)
	go func() {
		h := <-host.ports[api.PortEgressHTTP]
		defer h.Close()
		b, _ := io.ReadAll(h) // until the client's half-close
		hostGot <- b
		h.Write(down)
		h.CloseWrite()
	}()
	if _, err := c.Write(up); err != nil {
		t.Fatal(err)
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	if b := <-hostGot; !bytes.Equal(b, up) {
		t.Errorf("host got %d bytes, want the %d sent (equal: false)", len(b), len(up))
	}
	if !bytes.Equal(got, down) {
		t.Errorf("client got %d bytes, want the %d sent (equal: false)", len(got), len(down))
	}
}

// TestHalfCloseFromHost: the host finishes first; the client reads EOF and
// can still send, and the host still receives.
func TestHalfCloseFromHost(t *testing.T) {
	leakcheck.Goroutines(t)
	host := newFakeHost(api.PortEgressSOCKS)
	_, addr := serve(t, Config{Dial: host.Dial}, api.PortEgressSOCKS)
	c := dial(t, addr)
	if _, err := c.Write([]byte("x")); err != nil { // make the stream open
		t.Fatal(err)
	}
	h := host.accept(t, api.PortEgressSOCKS)
	defer h.Close()
	one := make([]byte, 1)
	if _, err := io.ReadFull(h, one); err != nil || one[0] != 'x' {
		t.Fatalf("host read %q, %v", one, err)
	}
	go func() {
		h.Write([]byte("hello"))
		h.CloseWrite()
	}()
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "hello" {
		t.Fatalf("client read %q, %v; want hello then EOF", got, err)
	}
	if _, err := c.Write([]byte("after")); err != nil {
		t.Fatalf("client write after host half-close: %v", err)
	}
	c.CloseWrite()
	rest, err := io.ReadAll(h)
	if err != nil || string(rest) != "after" {
		t.Fatalf("host read %q, %v; want after then EOF", rest, err)
	}
}

// expectClosedFast checks that the client's next read ends (EOF or reset)
// well before any timeout, with no data.
func expectClosedFast(t *testing.T, c net.Conn, within time.Duration) {
	t.Helper()
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(5 * time.Second))
	n, err := c.Read(make([]byte, 16))
	took := time.Since(start)
	var ne net.Error
	if n != 0 || err == nil || (errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("client read %d bytes, %v after %v; want EOF or reset", n, err, took)
	}
	if took > within {
		t.Fatalf("client saw %v only after %v; want it within %v", err, took, within)
	}
}

// expectResetFast connects to addr, sends msg, and checks that the
// connection ends within the given time. The reset may come so soon that
// connect itself reports it, which is just as good.
func expectResetFast(t *testing.T, addr string, msg []byte, within time.Duration) {
	t.Helper()
	start := time.Now()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("dial: %v; want success or a reset", err)
		}
		return
	}
	defer c.Close()
	c.Write(msg)
	expectClosedFast(t, c, within-time.Since(start))
}

// TestRefusedPortResetsClient: the host has no listener on the port (no
// gate yet); the client is reset at once.
func TestRefusedPortResetsClient(t *testing.T) {
	leakcheck.Goroutines(t)
	host := newFakeHost() // listens on nothing
	_, addr := serve(t, Config{Dial: host.Dial}, api.PortEgressHTTP)
	expectResetFast(t, addr, []byte("GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n"), time.Second)
}

// TestDialTimeout: a host that never answers the stream open costs the
// client at most the dial timeout.
func TestDialTimeout(t *testing.T) {
	leakcheck.Goroutines(t)
	hang := func(ctx context.Context, port uint32) (net.Conn, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	_, addr := serve(t, Config{Dial: hang, DialTimeout: 100 * time.Millisecond}, api.PortEgressHTTP)
	expectResetFast(t, addr, nil, 2*time.Second)
}

// TestCap: beyond MaxConns a new connection is reset at once without
// reaching the host; when one ends, there is room again.
func TestCap(t *testing.T) {
	leakcheck.Goroutines(t)
	host := newFakeHost(api.PortEgressHTTP)
	f, addr := serve(t, Config{Dial: host.Dial, MaxConns: 2}, api.PortEgressHTTP)
	var held []*hostConn
	var clients []net.Conn
	for range 2 {
		c := dial(t, addr)
		clients = append(clients, c)
		held = append(held, host.accept(t, api.PortEgressHTTP))
	}
	defer func() {
		for _, h := range held {
			h.Close()
		}
	}()
	if n := f.Active(); n != 2 {
		t.Fatalf("Active = %d, want 2", n)
	}
	expectResetFast(t, addr, nil, time.Second)
	host.mu.Lock()
	dials := host.dials
	host.mu.Unlock()
	if dials != 2 {
		t.Errorf("host saw %d dials, want 2 (the connection over the cap must not reach it)", dials)
	}

	// End the first connection (host first, then the client, as a client
	// does on EOF); its slot frees up.
	held[0].Close()
	expectClosedFast(t, clients[0], time.Second)
	clients[0].Close()
	deadline := time.Now().Add(5 * time.Second)
	for f.Active() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("Active = %d after one connection ended, want 1", f.Active())
		}
		time.Sleep(5 * time.Millisecond)
	}
	c := dial(t, addr)
	c.Write([]byte("ok"))
	h := host.accept(t, api.PortEgressHTTP)
	held = append(held, h)
	b := make([]byte, 2)
	if _, err := io.ReadFull(h, b); err != nil || string(b) != "ok" {
		t.Fatalf("host read %q, %v after a slot freed", b, err)
	}
}

// TestHostFailureClosesClient: when the host's stream fails, the client's
// connection is closed, even though the client is only waiting to read.
func TestHostFailureClosesClient(t *testing.T) {
	leakcheck.Goroutines(t)
	host := newFakeHost(api.PortEgressHTTP)
	_, addr := serve(t, Config{Dial: host.Dial}, api.PortEgressHTTP)
	c := dial(t, addr)
	h := host.accept(t, api.PortEgressHTTP)
	h.abort(errors.New("stream reset"))
	expectClosedFast(t, c, time.Second)
}

// TestClientResetClosesHost: when the client resets, the host's stream is
// closed both ways.
func TestClientResetClosesHost(t *testing.T) {
	leakcheck.Goroutines(t)
	host := newFakeHost(api.PortEgressHTTP)
	_, addr := serve(t, Config{Dial: host.Dial}, api.PortEgressHTTP)
	c := dial(t, addr)
	h := host.accept(t, api.PortEgressHTTP)
	defer h.Close()
	c.SetLinger(0)
	c.Close()
	if _, err := io.ReadAll(h); err != nil {
		t.Fatalf("host read: %v", err)
	}
	// The stream is closed for writing too, not just half-closed.
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := h.pipe.Write([]byte("x")); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("host can still write to a stream whose client reset")
		}
	}
}

// TestCancelClosesEverything: cancelling Serve's context closes the
// listener and every connection, and Serve returns with nothing left.
func TestCancelClosesEverything(t *testing.T) {
	leakcheck.Goroutines(t)
	host := newFakeHost(api.PortEgressHTTP)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := New(Config{Dial: host.Dial})
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- f.Serve(ctx, l, api.PortEgressHTTP) }()
	var cs []net.Conn
	for range 5 {
		c := dial(t, l.Addr().String())
		cs = append(cs, c)
		h := host.accept(t, api.PortEgressHTTP)
		defer h.Close()
	}
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return")
	}
	if f.Active() != 0 {
		t.Errorf("Active = %d after Serve returned", f.Active())
	}
	for _, c := range cs {
		expectClosedFast(t, c, time.Second)
	}
	if _, err := net.Dial("tcp", l.Addr().String()); err == nil {
		t.Error("listener still accepts after cancel")
	}
}

// TestManyConnections runs connections concurrently, each echoing through
// the host, and checks every byte and that nothing is left behind.
func TestManyConnections(t *testing.T) {
	leakcheck.Goroutines(t)
	host := newFakeHost(api.PortEgressHTTP)
	f, addr := serve(t, Config{Dial: host.Dial, MaxConns: 64}, api.PortEgressHTTP)
	stopEcho := make(chan struct{})
	var echoes sync.WaitGroup
	echoes.Go(func() {
		for {
			select {
			case h := <-host.ports[api.PortEgressHTTP]:
				echoes.Go(func() {
					defer h.Close()
					io.Copy(h, h)
					h.CloseWrite()
				})
			case <-stopEcho:
				return
			}
		}
	})
	defer func() { close(stopEcho); echoes.Wait() }()

	var wg sync.WaitGroup
	for i := range 32 {
		wg.Go(func() {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			msg := bytes.Repeat([]byte{byte(i)}, 64<<10+i)
			go func() {
				c.Write(msg)
				c.(*net.TCPConn).CloseWrite()
			}()
			got, err := io.ReadAll(c)
			if err != nil || !bytes.Equal(got, msg) {
				t.Errorf("conn %d: echoed %d bytes, %v; want %d equal bytes", i, len(got), err, len(msg))
			}
		})
	}
	wg.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for f.Active() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("Active = %d after every client finished", f.Active())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestListenLoopbackOnly(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:3128", ":3128", "10.0.2.15:3128", "localhost:3128", "127.0.0.1:0", "[::]:1080"} {
		ls, err := Listen([]Route{{Addr: "127.0.0.1:0"}, {Addr: addr, Port: 1}})
		if err == nil {
			closeAll(ls)
			t.Errorf("Listen(%q) succeeded; want a refusal", addr)
		} else if !strings.Contains(err.Error(), "not a loopback address") {
			t.Errorf("Listen(%q): %v", addr, err)
		}
	}
	// A refusal leaves nothing bound: the first route's port is free again.
	ls, err := Listen([]Route{{Addr: "127.0.0.1:0"}, {Addr: "[::1]:0"}})
	if err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	}
	closeAll(ls)
}

func TestDefaultRoutes(t *testing.T) {
	want := []Route{{"127.0.0.1:3128", api.PortEgressHTTP}, {"127.0.0.1:1080", api.PortEgressSOCKS}}
	got := DefaultRoutes()
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("DefaultRoutes = %v, want %v", got, want)
	}
}
