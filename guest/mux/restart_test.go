package mux

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/leakcheck"
)

// guestPort stands for the guest's end of a virtio-serial port: each agent
// opens it afresh, and one that dies closes only its own descriptor, so the
// host sees nothing but the next agent's bytes.
type guestPort struct {
	t *testing.T
	f *os.File
}

func newGuestPort(t *testing.T) (net.Conn, *guestPort) {
	a, b := socketPair(t)
	f, err := b.(*net.UnixConn).File()
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	t.Cleanup(func() { f.Close() })
	return a, &guestPort{t: t, f: f}
}

// open starts an agent's Server, listening on port 7 and echoing.
func (p *guestPort) open() (*Session, net.Conn) {
	c, err := net.FileConn(p.f)
	if err != nil {
		p.t.Fatal(err)
	}
	s := Server(c, Config{})
	ln, err := s.Listen(7)
	if err != nil {
		select {
		case <-s.Done(): // the host hung up at once (TestPeerRestartStorm's last agent)
			return s, c
		default:
			p.t.Fatal(err)
		}
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	return s, c
}

// kill ends an agent the way SIGKILL does: its descriptor goes, nothing
// is said to the host.
func kill(s *Session, c net.Conn) {
	c.Close()
	<-s.Done()
}

func echo(t *testing.T, host *Session, msg string) net.Conn {
	t.Helper()
	c, err := host.Dial(ctxT(t, 5*time.Second), 7)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatalf("write: %v", err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != msg {
		t.Fatalf("echo = %q, %v", got, err)
	}
	c.SetDeadline(time.Time{})
	return c
}

// TestPeerRestart checks that the host goes on with a guest that starts
// afresh: the old streams end with ErrPeerRestarted, what the host sent
// the dead agent is skipped by its successor, and the next Dial works.
func TestPeerRestart(t *testing.T) {
	leakcheck.Goroutines(t)
	hc, port := newGuestPort(t)
	host := Client(hc, Config{})
	defer host.Close()
	g1, c1 := port.open()
	old := echo(t, host, "first")
	kill(g1, c1)
	// The host does not know yet: these bytes wait in the port for the
	// next agent, which must not take them for its session.
	old.Write(bytes.Repeat([]byte("stale"), 1000))
	g2, c2 := port.open()
	defer kill(g2, c2)
	old.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := old.Read(make([]byte, 1)); !errors.Is(err, ErrPeerRestarted) || !errors.Is(err, ErrClosed) {
		t.Fatalf("read on a dead agent's stream = %v", err)
	}
	old.Close()
	echo(t, host, "second").Close()
	if host.Err() != nil || host.Restarts() != 1 {
		t.Fatalf("after a restart: err %v, restarts %d", host.Err(), host.Restarts())
	}
}

// TestPeerRestartStorm checks the bound: one restart more than
// Config.PeerRestarts in the window ends the session.
func TestPeerRestartStorm(t *testing.T) {
	leakcheck.Goroutines(t)
	hc, port := newGuestPort(t)
	host := Client(hc, Config{PeerRestarts: 2})
	defer host.Close()
	for i := range 3 {
		g, c := port.open()
		echo(t, host, "hi").Close()
		kill(g, c)
		if i < 2 && host.Restarts() != i {
			t.Fatalf("restart %d: Restarts() = %d", i, host.Restarts())
		}
	}
	g, c := port.open()
	defer kill(g, c)
	select {
	case <-host.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the fourth agent was accepted")
	}
	if err := host.Err(); !errors.Is(err, ErrProtocol) {
		t.Fatalf("Err = %v", err)
	}
}

// TestPeerRestartRefused checks that only a clean hello at a frame
// boundary counts as a restart; anything else ends the session as before.
func TestPeerRestartRefused(t *testing.T) {
	cat := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
	tests := []struct {
		name string
		in   []byte
	}{
		{"wrong version", cat([]byte(helloMagic), []byte{1, 0}, make([]byte, nonceSize))},
		{"reserved byte", cat([]byte(helloMagic), []byte{helloVersion, 9}, make([]byte, nonceSize))},
		{"partial magic", cat([]byte("AIRLKMU"), make([]byte, 20))},
		{"inside a frame", cat(rawFrame(0, 0, 2, 4), hello(nonce{}), rawFrame(1, 0, 2, 0))},
		{"restarts not allowed", hello(nonce{})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			leakcheck.Goroutines(t)
			a, b := net.Pipe()
			cfg := Config{}
			if tt.name == "restarts not allowed" {
				cfg.PeerRestarts = -1
			}
			host := Client(a, cfg)
			defer host.Close()
			go io.Copy(io.Discard, b)
			b.Write(hello(nonce{}))
			b.Write(tt.in)
			select {
			case <-host.Done():
			case <-time.After(5 * time.Second):
				t.Fatal("session did not end")
			}
			b.Close()
			if err := host.Err(); !errors.Is(err, ErrProtocol) {
				t.Fatalf("Err = %v, want a protocol violation", err)
			}
		})
	}
}

// TestPeerRestartMute checks that a restart whose hello never completes
// costs the session, in bounded time.
func TestPeerRestartMute(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the handshake timeout")
	}
	leakcheck.Goroutines(t)
	a, b := net.Pipe()
	defer b.Close()
	host := Client(a, Config{})
	defer host.Close()
	go io.Copy(io.Discard, b)
	b.Write(hello(nonce{}))
	b.Write([]byte(helloMagic)) // and no more
	select {
	case <-host.Done():
	case <-time.After(handshakeTimeout + 5*time.Second):
		t.Fatal("session did not end")
	}
	if err := host.Err(); !errors.Is(err, ErrProtocol) {
		t.Fatalf("Err = %v", err)
	}
}

func TestAwaitAckSkipsStale(t *testing.T) {
	n := nonce{1, 2, 3, 4, 5, 6, 7, 8}
	in := bytes.Join([][]byte{[]byte("AIRLKACK"), ack(nonce{}), []byte("AIRLKAC"), ack(n), []byte("after")}, nil)
	r := bufio.NewReader(bytes.NewReader(in))
	if err := awaitAck(r, n); err != nil {
		t.Fatal(err)
	}
	if rest, _ := io.ReadAll(r); string(rest) != "after" {
		t.Fatalf("after the ack: %q", rest)
	}
	if err := awaitAck(bufio.NewReader(bytes.NewReader(ack(nonce{}))), n); err == nil {
		t.Fatal("a wrong nonce was taken for the ack")
	}
}
