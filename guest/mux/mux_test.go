package mux

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/leakcheck"
)

// pipeKinds are the byte streams sessions are tested over.
var pipeKinds = map[string]func(t testing.TB) (net.Conn, net.Conn){
	"netpipe":    func(testing.TB) (net.Conn, net.Conn) { return net.Pipe() },
	"socketpair": socketPair,
}

// socketPair returns two connected unix stream sockets.
func socketPair(t testing.TB) (net.Conn, net.Conn) {
	t.Helper()
	dir, err := os.MkdirTemp("", "mux")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ln, err := net.Listen("unix", filepath.Join(dir, "s"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ch := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		ch <- c
	}()
	a, err := net.Dial("unix", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b := <-ch
	if b == nil {
		t.Fatal("accept failed")
	}
	return a, b
}

// pair starts a host Client and a guest Server connected by kind.
func pair(t *testing.T, kind string, cfg Config) (host, guest *Session) {
	t.Helper()
	a, b := pipeKinds[kind](t)
	host, guest = Client(a, cfg), Server(b, cfg)
	t.Cleanup(func() {
		host.Close()
		guest.Close()
	})
	return host, guest
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestDialListen(t *testing.T) {
	for kind := range pipeKinds {
		for _, dir := range []string{"host-to-guest", "guest-to-host"} {
			t.Run(kind+"/"+dir, func(t *testing.T) {
				leakcheck.Goroutines(t)
				host, guest := pair(t, kind, Config{})
				dialer, listener := host, guest
				if dir == "guest-to-host" {
					dialer, listener = guest, host
				}
				ln, err := listener.Listen(1024)
				if err != nil {
					t.Fatal(err)
				}
				go acceptEach(ln, func(c net.Conn) {
					defer c.Close()
					io.Copy(c, c)
				})
				c, err := dialer.Dial(ctxT(t, 5*time.Second), 1024)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				if got := c.RemoteAddr().String(); got != "mux:1024" {
					t.Errorf("RemoteAddr = %s", got)
				}
				msg := []byte("hello through the mux")
				if _, err := c.Write(msg); err != nil {
					t.Fatal(err)
				}
				got := make([]byte, len(msg))
				if _, err := io.ReadFull(c, got); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, msg) {
					t.Fatalf("echo = %q", got)
				}
			})
		}
	}
}

func TestDialErrors(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, guest *Session)
		port  uint32
		want  error
	}{
		{"no listener", func(*testing.T, *Session) {}, 7, ErrRefused},
		{"listener closed", func(t *testing.T, g *Session) {
			ln, err := g.Listen(7)
			if err != nil {
				t.Fatal(err)
			}
			ln.Close()
		}, 7, ErrRefused},
		{"backlog full", func(t *testing.T, g *Session) {
			if _, err := g.Listen(7); err != nil { // never accepts
				t.Fatal(err)
			}
		}, 7, ErrRefused},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			leakcheck.Goroutines(t)
			host, guest := pair(t, "netpipe", Config{AcceptBacklog: 2})
			tt.setup(t, guest)
			if tt.name == "backlog full" {
				for i := range 2 {
					if _, err := host.Dial(ctxT(t, 5*time.Second), tt.port); err != nil {
						t.Fatalf("dial %d within the backlog: %v", i, err)
					}
				}
			}
			_, err := host.Dial(ctxT(t, 5*time.Second), tt.port)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Dial = %v, want %v", err, tt.want)
			}
			// The session survives a refusal.
			ln, err := guest.Listen(8)
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			go ln.Accept()
			if c, err := host.Dial(ctxT(t, 5*time.Second), 8); err != nil {
				t.Fatalf("dial after refusal: %v", err)
			} else {
				c.Close()
			}
		})
	}
}

func TestListenPortInUse(t *testing.T) {
	leakcheck.Goroutines(t)
	host, _ := pair(t, "netpipe", Config{})
	ln, err := host.Listen(1025) // before the hello: must work
	if err != nil {
		t.Fatal(err)
	}
	if _, err := host.Listen(1025); !errors.Is(err, ErrPortInUse) {
		t.Fatalf("second Listen = %v, want ErrPortInUse", err)
	}
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	if err := ln.Close(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("second Close = %v", err)
	}
	if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Close = %v", err)
	}
	ln2, err := host.Listen(1025)
	if err != nil {
		t.Fatalf("Listen after Close: %v", err)
	}
	ln2.Close()
}

func TestHalfClose(t *testing.T) {
	for kind := range pipeKinds {
		t.Run(kind, func(t *testing.T) {
			leakcheck.Goroutines(t)
			host, guest := pair(t, kind, Config{})
			ln, _ := guest.Listen(1)
			errc := make(chan error, 1)
			go func() {
				c, err := ln.Accept()
				if err != nil {
					errc <- err
					return
				}
				defer c.Close()
				req, err := io.ReadAll(c) // until the host's CloseWrite
				if err != nil {
					errc <- err
					return
				}
				_, err = c.Write(append([]byte("got "), req...))
				if err == nil {
					err = c.(interface{ CloseWrite() error }).CloseWrite()
				}
				errc <- err
			}()
			c, err := host.Dial(ctxT(t, 5*time.Second), 1)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.Write([]byte("request"))
			if err := c.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Write([]byte("x")); err == nil {
				t.Error("Write after CloseWrite succeeded")
			}
			resp, err := io.ReadAll(c)
			if err != nil {
				t.Fatal(err)
			}
			if string(resp) != "got request" {
				t.Fatalf("response %q", resp)
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestWindowByOpener: a stream's receive window depends on who opened it:
// the peer may send Window ahead on the streams we open, only PeerWindow on
// those it opens (the host keeps a hostile guest's many streams small).
func TestWindowByOpener(t *testing.T) {
	leakcheck.Goroutines(t)
	a, b := socketPair(t)
	host := Client(a, Config{Window: 1 << 20, PeerWindow: minWindow})
	guest := Server(b, Config{})
	defer host.Close()
	defer guest.Close()
	// ahead is how much w can write to a peer that does not read.
	ahead := func(w net.Conn) int {
		w.SetWriteDeadline(time.Now().Add(300 * time.Millisecond))
		n, err := w.Write(make([]byte, 4<<20))
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("write to a peer that does not read: %d bytes, %v", n, err)
		}
		return n
	}
	ours, theirs := dialAccepted(t, host, guest) // the host opens it
	defer ours.Close()
	defer theirs.Close()
	if n := ahead(theirs); n != 1<<20 {
		t.Errorf("the guest sent %d bytes ahead on a stream the host opened, want its window %d", n, 1<<20)
	}
	if n := ahead(ours); n != minWindow {
		t.Errorf("the host sent %d bytes ahead, want the guest's window %d", n, minWindow)
	}
	gd, ha := dialAccepted(t, guest, host) // the guest opens it
	defer gd.Close()
	defer ha.Close()
	if n := ahead(gd); n != minWindow {
		t.Errorf("the guest sent %d bytes ahead on a stream it opened, want the host's PeerWindow %d", n, minWindow)
	}
}

func TestDeadlines(t *testing.T) {
	leakcheck.Goroutines(t)
	host, guest := pair(t, "socketpair", Config{})
	c, peer := dialAccepted(t, host, guest)
	defer c.Close()
	defer peer.Close()

	c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	start := time.Now()
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("Read past deadline = %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("read deadline took %v", d)
	}
	// A deadline in the past unblocks a pending Read.
	c.SetReadDeadline(time.Time{})
	go func() {
		time.Sleep(50 * time.Millisecond)
		c.SetReadDeadline(time.Unix(1, 0))
	}()
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Read after moving the deadline = %v", err)
	}
	// The peer never reads: writes stop at the window, then time out.
	c.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
	n, err := c.Write(make([]byte, 4<<20))
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Write past deadline = %v", err)
	}
	if n > minWindow {
		t.Errorf("wrote %d bytes to a peer that does not read; window is %d", n, minWindow)
	}
	// Clearing the deadline and reading on the peer lets writes go on.
	c.SetWriteDeadline(time.Time{})
	go io.CopyN(io.Discard, peer, int64(n)+1)
	if _, err := c.Write([]byte{1}); err != nil {
		t.Fatal(err)
	}
}

// pattern fills a stream-specific, reproducible byte sequence.
func pattern(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	return b
}

func TestManyStreams(t *testing.T) {
	const streams, size = 64, 1 << 20
	for kind := range pipeKinds {
		t.Run(kind, func(t *testing.T) {
			if testing.Short() && kind == "netpipe" {
				t.Skip("short")
			}
			leakcheck.Goroutines(t)
			host, guest := pair(t, kind, Config{})
			ln, _ := guest.Listen(9)
			// The guest: read a stream id, then send its pattern while
			// checking the host's.
			go acceptEach(ln, func(c net.Conn) {
				defer c.Close()
				var id [8]byte
				if _, err := io.ReadFull(c, id[:]); err != nil {
					return
				}
				seed := binary.BigEndian.Uint64(id[:])
				// Close only after the write is done: closing
				// while writing would cut the stream short.
				wrote := make(chan struct{})
				go func() { c.Write(pattern(seed+1000, size)); close(wrote) }()
				h := sha256.New()
				io.CopyN(h, c, size)
				<-wrote
				if !bytes.Equal(h.Sum(nil), sum(pattern(seed, size))) {
					c.Write([]byte("bad"))
				}
			})
			var wg sync.WaitGroup
			errs := make(chan error, streams)
			for i := range streams {
				wg.Go(func() {
					c, err := host.Dial(ctxT(t, 30*time.Second), 9)
					if err != nil {
						errs <- err
						return
					}
					defer c.Close()
					c.Write(binary.BigEndian.AppendUint64(nil, uint64(i)))
					go c.Write(pattern(uint64(i), size))
					got, err := io.ReadAll(c)
					if err != nil {
						errs <- fmt.Errorf("stream %d: %w", i, err)
						return
					}
					if !bytes.Equal(got, pattern(uint64(i)+1000, size)) {
						errs <- fmt.Errorf("stream %d: %d bytes, not byte-exact", i, len(got))
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
		})
	}
}

func sum(b []byte) []byte {
	h := sha256.Sum256(b)
	return h[:]
}

// rawFrame encodes a frame header (see frame.go).
func rawFrame(typ uint8, flags uint16, id, length uint32) []byte {
	h := []byte{0, typ, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint16(h[2:], flags)
	binary.BigEndian.PutUint32(h[4:], id)
	binary.BigEndian.PutUint32(h[8:], length)
	return h
}

func TestPeerGarbage(t *testing.T) {
	helloV := func(v byte) []byte { return append(append([]byte(helloMagic), v, 0), make([]byte, nonceSize)...) }
	cat := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
	open2 := rawFrame(1, flagSYN, 2, 1) // the guest opens stream 2 to port 1, where the host listens
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"bad magic", []byte("SSH-2.0-OpenSSH_9.2\r\n"), ErrProtocol},
		{"wrong version", helloV(1), ErrProtocol},
		{"short hello then EOF", []byte("AIRL"), ErrProtocol},
		{"EOF before hello", nil, ErrClosed},
		{"EOF after hello", hello(nonce{}), io.EOF},
		{"bad frame version", cat(hello(nonce{}), []byte{1, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0}), ErrProtocol},
		{"unknown type", cat(hello(nonce{}), rawFrame(9, 0, 2, 0)), ErrProtocol},
		{"unknown flags", cat(hello(nonce{}), rawFrame(1, 0x10, 2, 0)), ErrProtocol},
		{"two flags", cat(hello(nonce{}), rawFrame(1, flagSYN|flagFIN, 2, 1)), ErrProtocol},
		{"data flags", cat(hello(nonce{}), open2, rawFrame(0, flagSYN, 2, 1), []byte{0}), ErrProtocol},
		{"ping (yamux)", cat(hello(nonce{}), rawFrame(2, 1, 0, 7)), ErrProtocol},
		{"stream id 0", cat(hello(nonce{}), rawFrame(1, 1, 0, 0)), ErrProtocol},
		{"our id space", cat(hello(nonce{}), rawFrame(1, 1, 3, 0)), ErrProtocol},
		{"oversized data frame", cat(hello(nonce{}), open2, rawFrame(0, 0, 2, 1<<30)), ErrProtocol},
		{"window exceeded", cat(hello(nonce{}), open2, rawFrame(0, 0, 2, minWindow), make([]byte, minWindow), rawFrame(0, 0, 2, 1), []byte{0}), ErrProtocol},
		{"duplicate stream", cat(hello(nonce{}), rawFrame(1, 1, 2, 0), rawFrame(1, 1, 2, 0)), ErrProtocol},
		{"ids out of order", cat(hello(nonce{}), rawFrame(1, 1, 4, 0), rawFrame(1, 1, 2, 0)), ErrProtocol},
		{"data for a stream never opened", cat(hello(nonce{}), rawFrame(0, 0, 2, 1), []byte{0}), ErrProtocol},
		{"credit for a stream never opened", cat(hello(nonce{}), rawFrame(1, 0, 4, 1)), ErrProtocol},
		{"data after FIN", cat(hello(nonce{}), open2, rawFrame(0, flagFIN, 2, 1), []byte{0}, rawFrame(0, 0, 2, 1), []byte{0}), ErrProtocol},
		{"ACK for the peer's own stream", cat(hello(nonce{}), open2, rawFrame(1, flagACK, 2, 0)), ErrProtocol},
		{"credit overflow", cat(hello(nonce{}), open2, rawFrame(1, 0, 2, 1<<31)), ErrProtocol},
		{"empty data frame", cat(hello(nonce{}), open2, rawFrame(0, 0, 2, 0)), ErrProtocol},
		{"bad go-away (yamux)", cat(hello(nonce{}), rawFrame(3, 0, 0, 77)), ErrProtocol},
		{"truncated header", cat(hello(nonce{}), rawFrame(1, 1, 2, 0)[:5]), ErrProtocol},
		{"truncated data", cat(hello(nonce{}), open2, rawFrame(0, 0, 2, 100), []byte("abc")), ErrProtocol},
		{"random", cat(hello(nonce{}), pattern(1, 4096)), ErrProtocol},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			leakcheck.Goroutines(t)
			a, b := net.Pipe()
			host := Client(a, Config{})
			defer host.Close()
			ln, _ := host.Listen(1)
			defer ln.Close()
			go io.Copy(io.Discard, b)
			b.Write(tt.in)
			time.Sleep(10 * time.Millisecond)
			b.Close()
			select {
			case <-host.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("session did not end")
			}
			if err := host.Err(); !errors.Is(err, tt.want) {
				t.Fatalf("Err = %v, want %v", err, tt.want)
			}
			if _, err := host.Dial(ctxT(t, time.Second), 1); err == nil {
				t.Fatal("Dial on an ended session succeeded")
			}
			if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
				t.Fatalf("Accept on an ended session = %v", err)
			}
		})
	}
}

// TestHelloFirst checks that the host writes nothing before the guest's
// hello, and that Dial waits for it.
func TestHelloFirst(t *testing.T) {
	leakcheck.Goroutines(t)
	a, b := net.Pipe()
	host := Client(a, Config{})
	defer host.Close()
	wrote := make(chan []byte, 1)
	go func() {
		buf := make([]byte, 64)
		n, _ := b.Read(buf)
		wrote <- buf[:n]
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := host.Dial(ctx, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Dial before hello = %v", err)
	}
	select {
	case got := <-wrote:
		t.Fatalf("host wrote %q before the hello", got)
	case <-time.After(50 * time.Millisecond):
	}
	b.Close()
}

// TestDialContext checks that Dial gives up when the peer never answers the
// port handshake.
func TestDialContext(t *testing.T) {
	leakcheck.Goroutines(t)
	a, b := net.Pipe()
	host := Client(a, Config{})
	defer host.Close()
	defer b.Close()
	go func() {
		b.Write(hello(nonce{}))
		io.Copy(io.Discard, b) // a mute peer
	}()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := host.Dial(ctx, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Dial to a mute peer = %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Dial took %v", d)
	}
}

// TestSessionEnd checks that a peer hanging up ends the session and every
// stream in it.
func TestSessionEnd(t *testing.T) {
	leakcheck.Goroutines(t)
	a, b := socketPair(t)
	host, guest := Client(a, Config{}), Server(b, Config{})
	defer host.Close()
	ln, _ := guest.Listen(1)
	go ln.Accept()
	c, err := host.Dial(ctxT(t, 5*time.Second), 1)
	if err != nil {
		t.Fatal(err)
	}
	hostLn, _ := host.Listen(2)
	readErr := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		readErr <- err
	}()
	guest.Close()
	select {
	case <-host.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("host session did not end")
	}
	if err := host.Err(); !errors.Is(err, ErrClosed) || !errors.Is(err, io.EOF) {
		t.Errorf("Err = %v, want ErrClosed and io.EOF", err)
	}
	if err := <-readErr; !errors.Is(err, ErrClosed) {
		t.Errorf("stream Read = %v, want ErrClosed", err)
	}
	if _, err := c.Write([]byte("x")); !errors.Is(err, ErrClosed) {
		t.Errorf("stream Write = %v, want ErrClosed", err)
	}
	if _, err := hostLn.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept = %v", err)
	}
	if _, err := host.Listen(3); !errors.Is(err, ErrClosed) {
		t.Errorf("Listen = %v", err)
	}
	if _, err := host.Dial(ctxT(t, time.Second), 1); !errors.Is(err, ErrClosed) {
		t.Errorf("Dial = %v", err)
	}
	if err := host.Close(); err != nil {
		t.Error(err)
	}
}

// TestHostilePeerNeverReads checks that a peer that stops reading bounds
// what this side buffers: writers block at the window instead of queueing.
func TestHostilePeerNeverReads(t *testing.T) {
	a, b := socketPair(t)
	host := Client(a, Config{})
	defer host.Close()
	guest := Server(b, Config{})
	defer guest.Close()
	ln, _ := guest.Listen(1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			defer c.Close()
			<-guest.Done() // accepts, never reads
		}
	}()
	const streams = 8
	var total int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	for range streams {
		c, err := host.Dial(ctxT(t, 5*time.Second), 1)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		wg.Go(func() {
			c.SetWriteDeadline(time.Now().Add(500 * time.Millisecond))
			buf := make([]byte, 1<<20)
			var n int64
			for {
				m, err := c.Write(buf)
				n += int64(m)
				if err != nil {
					break
				}
			}
			mu.Lock()
			total += n
			mu.Unlock()
		})
	}
	wg.Wait()
	runtime.GC()
	runtime.ReadMemStats(&m1)
	// Only one stream is accepted; the rest are in the listener queue. Each
	// stream gets at most one window.
	if max := int64(streams * minWindow); total > max {
		t.Errorf("peer that never reads was sent %d bytes, more than %d (windows)", total, max)
	}
	if grow := int64(m1.HeapInuse) - int64(m0.HeapInuse); grow > 64<<20 {
		t.Errorf("heap grew by %d bytes", grow)
	}
	t.Logf("sent %d bytes over %d streams before blocking", total, streams)
}

// TestGoroutinesEnd checks that closing a busy session ends everything.
func TestGoroutinesEnd(t *testing.T) {
	leakcheck.Goroutines(t)
	a, b := socketPair(t)
	host, guest := Client(a, Config{}), Server(b, Config{})
	ln, _ := guest.Listen(1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go io.Copy(c, c)
		}
	}()
	for range 16 {
		c, err := host.Dial(ctxT(t, 5*time.Second), 1)
		if err != nil {
			t.Fatal(err)
		}
		go io.Copy(io.Discard, c)
		go c.Write(make([]byte, 1<<20))
	}
	// A few streams closed by this side while the peer still sends.
	for range 4 {
		c, _ := host.Dial(ctxT(t, 5*time.Second), 1)
		c.Write(make([]byte, 100))
		c.Close()
	}
	host.Close()
	guest.Close()
	if !strings.Contains(fmt.Sprint(host.Err()), "closed") {
		t.Errorf("Err = %v", host.Err())
	}
}

// TestCloseWriteDuringWrite checks that a FIN never overtakes a frame a
// concurrent Write is still sending: the peer reads what was written, then
// EOF, and neither session sees a protocol violation.
func TestCloseWriteDuringWrite(t *testing.T) {
	leakcheck.Goroutines(t)
	host, guest := pair(t, "socketpair", Config{})
	ln, _ := guest.Listen(1)
	got := make(chan error, 1)
	go acceptEach(ln, func(c net.Conn) {
		// A lost FIN fails the test instead of waiting for the
		// close timer (5 minutes).
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		_, err := io.Copy(io.Discard, c)
		c.Close()
		got <- err
	})
	for i := range 50 {
		c, err := host.Dial(ctxT(t, 5*time.Second), 1)
		if err != nil {
			t.Fatal(err)
		}
		// Two writers, so that one can finish its frame while the other's
		// is still on its way.
		var writers sync.WaitGroup
		for range 2 {
			writers.Go(func() {
				buf := make([]byte, 96<<10)
				for {
					if _, err := c.Write(buf); err != nil {
						return
					}
				}
			})
		}
		wrote := make(chan struct{})
		go func() {
			writers.Wait()
			close(wrote)
		}()
		time.Sleep(time.Duration(i%5) * time.Millisecond)
		if i%2 == 0 {
			c.(interface{ CloseWrite() error }).CloseWrite()
		} else {
			c.Close()
		}
		<-wrote
		if err := <-got; err != nil {
			t.Fatalf("round %d: peer read %v", i, err)
		}
		c.Close()
	}
	if host.Err() != nil || guest.Err() != nil {
		t.Fatalf("sessions ended: %v, %v", host.Err(), guest.Err())
	}
}

// TestConcurrentReads checks that Reads racing on one stream each get
// bytes the peer sent, none another's buffer holds.
func TestConcurrentReads(t *testing.T) {
	leakcheck.Goroutines(t)
	host, guest := pair(t, "socketpair", Config{})
	ln, _ := guest.Listen(1)
	const size = 16 << 20
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.Write(bytes.Repeat([]byte{0xab}, size))
	}()
	c, err := host.Dial(ctxT(t, 5*time.Second), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// A Read left waiting (once, for the 5 minutes until the peer's close
	// timer reset the stream) fails the test instead.
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	var total atomic.Int64
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			buf := make([]byte, 4<<10<<(2*i)) // 4 KiB to 256 KiB
			for {
				clear(buf)
				n, err := c.Read(buf)
				if bytes.Count(buf[:n], []byte{0xab}) != n {
					t.Errorf("read %d bytes that are not the peer's", n)
					return
				}
				total.Add(int64(n))
				if err != nil {
					if err != io.EOF {
						t.Errorf("read: %v", err)
					}
					return
				}
			}
		})
	}
	wg.Wait()
	if total.Load() != size {
		t.Fatalf("read %d bytes in all, want %d", total.Load(), size)
	}
}

// TestOpenBurst checks that a burst of opens larger than the accept backlog
// is held until Accept makes room, not refused.
func TestOpenBurst(t *testing.T) {
	leakcheck.Goroutines(t)
	host, guest := pair(t, "socketpair", Config{AcceptBacklog: 4})
	ln, _ := host.Listen(1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			time.Sleep(time.Millisecond) // a slow accept loop
			c.Close()
		}
	}()
	var wg sync.WaitGroup
	var refused atomic.Int32
	for range 100 {
		wg.Go(func() {
			c, err := guest.Dial(ctxT(t, 5*time.Second), 1)
			if err != nil {
				refused.Add(1)
				return
			}
			c.Close()
		})
	}
	wg.Wait()
	if n := refused.Load(); n > 0 {
		t.Errorf("%d of 100 opens refused", n)
	}
}

// acceptEach hands every connection ln accepts to handle on its own
// goroutine, until ln is closed.
func acceptEach(ln net.Listener, handle func(c net.Conn)) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go handle(c)
	}
}

// dialAccepted opens one stream from dialer to a listener on port 1 of
// listener and returns both ends.
func dialAccepted(t *testing.T, dialer, listener *Session) (dialed, accepted net.Conn) {
	t.Helper()
	ln, err := listener.Listen(1)
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		ch <- c
	}()
	dialed, err = dialer.Dial(ctxT(t, 5*time.Second), 1)
	if err != nil {
		t.Fatal(err)
	}
	return dialed, <-ch
}

// Streams the peer opens count apart from ours: a guest holding all the
// streams it may open cannot stop the host from opening its own (a task's
// stream), and the host's own opens stay bounded too.
func TestPeerStreamsDoNotStarveOurs(t *testing.T) {
	const max = 8
	host, guest := pair(t, "socketpair", Config{MaxStreams: max})
	hl, err := host.Listen(2)
	if err != nil {
		t.Fatal(err)
	}
	go acceptEach(hl, func(c net.Conn) { io.Copy(io.Discard, c); c.Close() })
	gl, err := guest.Listen(1)
	if err != nil {
		t.Fatal(err)
	}
	go acceptEach(gl, func(c net.Conn) { io.Copy(io.Discard, c); c.Close() })
	var flood []net.Conn
	for range max {
		c, err := guest.Dial(ctxT(t, 5*time.Second), 2)
		if err != nil {
			t.Fatal(err)
		}
		flood = append(flood, c)
	}
	if _, err := guest.Dial(ctxT(t, 5*time.Second), 2); !errors.Is(err, ErrTooManyStreams) && !errors.Is(err, ErrRefused) {
		t.Fatalf("stream %d from the guest: %v, want it refused", max+1, err)
	}
	var ours []net.Conn
	for i := range max {
		c, err := host.Dial(ctxT(t, 5*time.Second), 1)
		if err != nil {
			t.Fatalf("host stream %d while the guest holds %d: %v", i+1, len(flood), err)
		}
		ours = append(ours, c)
	}
	if _, err := host.Dial(ctxT(t, 5*time.Second), 1); !errors.Is(err, ErrTooManyStreams) {
		t.Fatalf("host stream %d: %v, want ErrTooManyStreams", max+1, err)
	}
	// Closing one of the guest's frees a slot for the guest, not the host.
	flood[0].Close()
	var c net.Conn
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if c, err = guest.Dial(ctxT(t, 5*time.Second), 2); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("the guest's freed slot: %v", err)
	}
	c.Close()
	for _, c := range append(flood, ours...) {
		c.Close()
	}
}

// rawGuestStream runs a host session over a and plays the guest on b by
// hand: its hello, then stream 2 opened to port 1, which it returns as
// the host accepted it. All of it closes with t; what the host sends is
// discarded.
func rawGuestStream(t *testing.T, a, b io.ReadWriteCloser) (*Session, net.Conn) {
	t.Helper()
	host := Client(a, Config{})
	ln, _ := host.Listen(1)
	go io.Copy(io.Discard, b)
	b.Write(append(hello(nonce{}), rawFrame(1, flagSYN, 2, 1)...))
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); b.Close(); host.Close() })
	return host, c
}

// TestReadDeadlineMidFrame checks that a Read whose buffer the receive loop
// is filling straight from the connection still ends at its deadline when
// the peer stops inside the frame, and that the frame's bytes, once they
// come, are read intact afterwards.
func TestReadDeadlineMidFrame(t *testing.T) {
	for kind, conns := range connKinds {
		t.Run(kind, func(t *testing.T) {
			leakcheck.Goroutines(t)
			a, b := conns(t)
			host, c := rawGuestStream(t, a, b)
			c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
			got := make(chan error, 1)
			go func() {
				_, err := c.Read(make([]byte, 64<<10))
				got <- err
			}()
			time.Sleep(100 * time.Millisecond) // the Read waits
			// A header, then nothing: the receive loop waits for the payload.
			const size = 32 << 10
			b.Write(rawFrame(0, 0, 2, size))
			select {
			case err := <-got:
				if !errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatalf("Read = %v, want the deadline", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Read ignored its deadline while the peer stalled mid-frame")
			}
			data := pattern(3, size)
			b.Write(data)
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			buf := make([]byte, size)
			if _, err := io.ReadFull(c, buf); err != nil || !bytes.Equal(buf, data) {
				t.Fatalf("after the deadline: %v, intact %v", err, bytes.Equal(buf, data))
			}
			if err := host.Err(); err != nil {
				t.Fatalf("session ended: %v", err)
			}
		})
	}
}

// A reader waiting with room for a whole frame gets it in one Read even
// when a connection without readv (the guest's port: a page per read)
// delivers the payload in pieces.
func TestWaitingReaderGetsWholeFrame(t *testing.T) {
	for _, kind := range []string{"netpipe", "ospipe"} {
		t.Run(kind, func(t *testing.T) {
			leakcheck.Goroutines(t)
			a, b := connKinds[kind](t)
			host, c := rawGuestStream(t, a, b)
			type result struct {
				n   int
				err error
			}
			got := make(chan result, 1)
			buf := make([]byte, 64<<10)
			go func() {
				n, err := c.Read(buf)
				got <- result{n, err}
			}()
			time.Sleep(100 * time.Millisecond) // the Read waits
			const size, piece = 32 << 10, 4 << 10
			data := pattern(5, size)
			b.Write(rawFrame(0, 0, 2, size))
			for p := data; len(p) > 0; p = p[piece:] {
				b.Write(p[:piece])
			}
			r := <-got
			if r.err != nil || r.n != size || !bytes.Equal(buf[:r.n], data) {
				t.Fatalf("Read = %d, %v (intact %v); want the whole %d-byte frame", r.n, r.err, bytes.Equal(buf[:r.n], data[:r.n]), size)
			}

			// A peer that stalls inside the next frame: the reader's
			// deadline ends the fill, and the frame arrives intact after.
			c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
			go func() {
				n, err := c.Read(buf)
				got <- result{n, err}
			}()
			time.Sleep(100 * time.Millisecond)
			data = pattern(6, size)
			b.Write(rawFrame(0, 0, 2, size))
			b.Write(data[:piece])
			r = <-got
			if r.n > 0 && !bytes.Equal(buf[:r.n], data[:r.n]) || r.n == 0 && !errors.Is(r.err, os.ErrDeadlineExceeded) {
				t.Fatalf("stalled mid-frame: Read = %d, %v", r.n, r.err)
			}
			b.Write(data[piece:])
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			rest := make([]byte, size-r.n)
			if _, err := io.ReadFull(c, rest); err != nil || !bytes.Equal(rest, data[r.n:]) {
				t.Fatalf("after the stall: %v, intact %v", err, bytes.Equal(rest, data[r.n:]))
			}
			if err := host.Err(); err != nil {
				t.Fatalf("session ended: %v", err)
			}
		})
	}
}

// TestPendingClient: a PendingClient reads nothing before Begin, so the
// host can first exchange its own records on the connection (vm/qemu's
// park); after Begin it is a Client, and Greeted closes with the hello.
func TestPendingClient(t *testing.T) {
	leakcheck.Goroutines(t)
	a, b := socketPair(t)
	host := PendingClient(a, Config{})
	defer host.Close()
	ln, err := host.Listen(7)
	if err != nil {
		t.Fatal(err)
	}
	go acceptEach(ln, func(c net.Conn) {
		defer c.Close()
		io.Copy(c, c)
	})
	// The guest's own record, before its multiplexer: the host's side
	// reads it from the raw connection, not the session.
	if _, err := b.Write([]byte("parked!!")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	select {
	case <-host.Greeted():
		t.Fatal("greeted before Begin")
	case <-host.Done():
		t.Fatalf("session ended before Begin: %v", host.Err())
	default:
	}
	got := make([]byte, 8)
	if _, err := io.ReadFull(a, got); err != nil || string(got) != "parked!!" {
		t.Fatalf("raw read before Begin: %q, %v", got, err)
	}
	guest := Server(b, Config{})
	defer guest.Close()
	host.Begin()
	host.Begin()
	select {
	case <-host.Greeted():
	case <-time.After(5 * time.Second):
		t.Fatal("not greeted after Begin")
	}
	c, err := guest.Dial(ctxT(t, 5*time.Second), 7)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, got[:4]); err != nil || string(got[:4]) != "ping" {
		t.Fatalf("echo %q, %v", got[:4], err)
	}
}

// TestPendingClientClose: a PendingClient closed before Begin ends.
func TestPendingClientClose(t *testing.T) {
	leakcheck.Goroutines(t)
	a, b := socketPair(t)
	defer b.Close()
	host := PendingClient(a, Config{})
	done := make(chan struct{})
	go func() {
		host.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close of a PendingClient never begun hangs")
	}
}
