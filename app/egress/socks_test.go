package egress

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"testing"
	"time"
)

// socksClient performs a SOCKS5 handshake by hand so tests see every byte.
type socksClient struct {
	user, pass string // user "" offers no-auth only
	cmd        byte
	atyp       byte // 0: chosen from host
}

// dial returns the connection, the method the server chose, the auth
// status (0xff if not asked) and the reply code (0xff if none).
func (sc socksClient) dial(t *testing.T, gate, host string, port uint16) (c net.Conn, method, auth, rep byte) {
	t.Helper()
	c, err := net.Dial("tcp", gate)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	if sc.user != "" {
		c.Write([]byte{5, 2, 0, 2})
	} else {
		c.Write([]byte{5, 1, 0})
	}
	var b [2]byte
	if _, err := io.ReadFull(br, b[:]); err != nil {
		t.Fatalf("method reply: %v", err)
	}
	method, auth, rep = b[1], 0xff, 0xff
	if method == 0xff {
		return c, method, auth, rep
	}
	if method == 2 {
		msg := append([]byte{1, byte(len(sc.user))}, sc.user...)
		msg = append(append(msg, byte(len(sc.pass))), sc.pass...)
		c.Write(msg)
		if _, err := io.ReadFull(br, b[:]); err != nil {
			t.Fatalf("auth reply: %v", err)
		}
		if auth = b[1]; auth != 0 {
			return c, method, auth, rep
		}
	}
	cmd := sc.cmd
	if cmd == 0 {
		cmd = 1
	}
	req := []byte{5, cmd, 0}
	a, err := netip.ParseAddr(host)
	switch {
	case sc.atyp != 0:
		req = append(req, sc.atyp, 1, 2, 3, 4)
	case err == nil && a.Is4():
		req = append(append(req, 1), a.AsSlice()...)
	case err == nil:
		req = append(append(req, 4), a.AsSlice()...)
	default:
		req = append(append(req, 3, byte(len(host))), host...)
	}
	req = binary.BigEndian.AppendUint16(req, port)
	c.Write(req)
	var reply [10]byte
	if _, err := io.ReadFull(br, reply[:]); err != nil {
		t.Fatalf("reply: %v", err)
	}
	if !bytes.Equal(reply[2:], []byte{0, 1, 0, 0, 0, 0, 0, 0}) {
		t.Errorf("reply %x leaks or mangles the bound address", reply)
	}
	if br.Buffered() > 0 {
		t.Fatal("bytes after the reply")
	}
	return c, method, auth, reply[1]
}

// getOver sends one HTTP request over an established tunnel.
func getOver(t *testing.T, c net.Conn, host, path string) []byte {
	t.Helper()
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", path, host)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSOCKS(t *testing.T) {
	srv := httptest.NewServer(origin())
	defer srv.Close()
	p, _ := strconv.Atoi(portOf(t, srv.Listener.Addr().String()))
	port := uint16(p)
	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	closedPort := uint16(closed.Addr().(*net.TCPAddr).Port)
	closed.Close()
	tg := startGate(t, Config{
		Allow:    []string{"127.0.0.1", "[::1]", "pub.test", "8.8.8.8", "private.test", "pub2.test", "origin.test"},
		MapHosts: []string{"origin.test=127.0.0.1"},
		Resolver: fakeResolver{"pub.test": {"8.8.8.8"}, "private.test": {"10.0.0.1"}},
		Dialer:   &redirectDialer{to: map[string]string{netip.AddrPortFrom(netip.MustParseAddr("8.8.8.8"), port).String(): srv.Listener.Addr().String()}},
	})
	user, pass := tg.Credentials("task-s")

	t.Run("by name", func(t *testing.T) {
		c, method, auth, rep := socksClient{user: user, pass: pass}.dial(t, tg.socksAddr, "origin.test", port)
		if method != 2 || auth != 0 || rep != 0 {
			t.Fatalf("method %d auth %d rep %d", method, auth, rep)
		}
		if b := getOver(t, c, "origin.test", "/blob"); !bytes.Equal(b, blob) {
			t.Fatalf("got %d bytes; want the blob", len(b))
		}
		c.Close()
		d := wantDecision(t, tg.Gate, ProtoSOCKS, "origin.test", ReasonAllowedByRule)
		if d.Task != "task-s" || d.Addr != "127.0.0.1" || d.BytesDown < int64(len(blob)) || d.BytesUp == 0 {
			t.Fatalf("decision %+v", d)
		}
	})
	t.Run("by public name", func(t *testing.T) {
		c, _, _, rep := socksClient{user: user, pass: pass}.dial(t, tg.socksAddr, "pub.test", port)
		if rep != 0 {
			t.Fatalf("rep %d", rep)
		}
		getOver(t, c, "pub.test", "/echo")
		c.Close()
		wantDecision(t, tg.Gate, ProtoSOCKS, "pub.test", ReasonAllowedByRule)
	})
	for _, ip := range []string{"127.0.0.1", "::1"} {
		t.Run("by IP "+ip, func(t *testing.T) {
			if ip == "::1" {
				if l, err := net.Listen("tcp", "[::1]:0"); err != nil {
					t.Skip("no IPv6 loopback")
				} else {
					l.Close()
				}
			}
			c, _, _, rep := socksClient{}.dial(t, tg.socksAddr, ip, port)
			if ip == "::1" { // the httptest server listens on IPv4 only
				if rep != repConnRefused {
					t.Fatalf("rep %d; want connection refused", rep)
				}
				wantDecision(t, tg.Gate, ProtoSOCKS, ip, ReasonDialFailed)
				return
			}
			if rep != 0 {
				t.Fatalf("rep %d", rep)
			}
			if b := getOver(t, c, ip, "/echo"); !bytes.Contains(b, []byte("host="+ip)) {
				t.Fatalf("got %q", b)
			}
			c.Close()
			d := wantDecision(t, tg.Gate, ProtoSOCKS, ip, ReasonAllowedByRule)
			if d.Task != "" || d.Rule != "127.0.0.1" {
				t.Fatalf("decision %+v", d)
			}
		})
	}
	tests := []struct {
		name   string
		client socksClient
		host   string
		port   uint16
		method byte
		auth   byte
		rep    byte
		reason Reason
	}{
		{"denied name", socksClient{user: user, pass: pass}, "other.test", 443, 2, 0, repNotAllowed, ReasonNoMatchingRule},
		{"private resolution", socksClient{}, "private.test", 443, 0, 0xff, repNotAllowed, ReasonPrivateAddress},
		{"ip literal no rule", socksClient{}, "1.1.1.1", 443, 0, 0xff, repNotAllowed, ReasonNoMatchingRule},
		{"metadata literal", socksClient{}, "169.254.169.254", 80, 0, 0xff, repNotAllowed, ReasonMetadataAddress},
		{"private literal", socksClient{}, "10.0.0.1", 80, 0, 0xff, repNotAllowed, ReasonPrivateAddress},
		{"unresolvable", socksClient{}, "pub2.test", 80, 0, 0xff, repHostUnreachable, ReasonResolveFailed},
		{"refused", socksClient{}, "127.0.0.1", closedPort, 0, 0xff, repConnRefused, ReasonDialFailed},
		{"bad password", socksClient{user: user, pass: "x"}, "origin.test", port, 2, 1, 0xff, ReasonAuthFailed},
		{"unknown user", socksClient{user: "who", pass: pass}, "origin.test", port, 2, 1, 0xff, ReasonAuthFailed},
		{"bind", socksClient{cmd: 2}, "origin.test", port, 0, 0xff, repCmdNotSupported, ReasonUnsupported},
		{"udp associate", socksClient{cmd: 3}, "origin.test", port, 0, 0xff, repCmdNotSupported, ReasonUnsupported},
		{"address type", socksClient{atyp: 9}, "origin.test", port, 0, 0xff, repAddrTypeNotSupport, ReasonBadRequest},
		{"bad name", socksClient{}, "exa mple.test", 80, 0, 0xff, repGeneralFailure, ReasonBadRequest},
		{"port 0", socksClient{}, "origin.test", 0, 0, 0xff, repGeneralFailure, ReasonBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			seq := len(tg.Recent())
			_, method, auth, rep := tt.client.dial(t, tg.socksAddr, tt.host, tt.port)
			if method != tt.method || auth != tt.auth || rep != tt.rep {
				t.Fatalf("method %#x auth %#x rep %#x; want %#x %#x %#x", method, auth, rep, tt.method, tt.auth, tt.rep)
			}
			d := waitDecision(t, tg.Gate, func(d Decision) bool { return d.Seq > uint64(seq) })
			if d.Reason != tt.reason || d.Protocol != ProtoSOCKS {
				t.Fatalf("decision %+v; want %s", d, tt.reason)
			}
		})
	}
}

func TestSOCKSRequireCredential(t *testing.T) {
	tg := startGate(t, Config{RequireCredential: true, Allow: []string{"origin.test"}, MapHosts: []string{"origin.test=127.0.0.1"}})
	_, method, _, _ := socksClient{}.dial(t, tg.socksAddr, "origin.test", 80)
	if method != 0xff {
		t.Fatalf("method %#x; want no acceptable method", method)
	}
	wantDecision(t, tg.Gate, ProtoSOCKS, "", ReasonAuthFailed)
}

func TestSOCKSHandshakeTimeout(t *testing.T) {
	tg := startGate(t, Config{Limits: Limits{HeaderTimeout: 200 * time.Millisecond}})
	c, err := net.Dial("tcp", tg.socksAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte{5, 1})
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("read %v; want EOF after the handshake deadline", err)
	}
	wantDecision(t, tg.Gate, ProtoSOCKS, "", ReasonTimeout)
}

func TestMaxConns(t *testing.T) {
	tg := startGate(t, Config{Limits: Limits{MaxConns: 2}})
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", tg.socksAddr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write([]byte{5, 1, 0})
		io.ReadFull(c, make([]byte, 2)) // served: the gate holds it
		held = append(held, c)
	}
	c, err := net.Dial("tcp", tg.socksAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("third connection: read %v; want EOF", err)
	}
	wantDecision(t, tg.Gate, ProtoSOCKS, "", ReasonTooManyConns)
	held[0].Close()
	waitDecision(t, tg.Gate, func(d Decision) bool { return d.Reason == ReasonBadRequest || d.Reason == ReasonTimeout })
	for deadline := time.Now().Add(5 * time.Second); tg.live.guests.Load() > 1 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	_, method, _, _ := socksClient{}.dial(t, tg.socksAddr, "x.test", 80)
	if method != 0 {
		t.Fatalf("after one closed: method %#x", method)
	}
}
