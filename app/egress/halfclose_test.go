package egress

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/guest/api"
	gegress "github.com/airlock-sandbox/airlock/guest/egress"
)

// noHalfClose is a transport connection without CloseWrite, as vz's
// VirtioSocketConnection is (a loopback TCP connection with the method
// hidden).
type noHalfClose struct{ net.Conn }

// noHalfCloseListener hands out its connections without CloseWrite.
type noHalfCloseListener struct{ net.Listener }

func (l noHalfCloseListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return noHalfClose{c}, nil
}

// halfCloseOrigin answers the first line it reads with "response", then
// half-closes and reports everything it reads after that, up to the
// client's half-close.
func halfCloseOrigin(t *testing.T) (addr string, upload <-chan string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	got := make(chan string, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(c)
		if _, err := br.ReadString('\n'); err != nil {
			got <- "origin: " + err.Error()
			return
		}
		io.WriteString(c, "response")
		c.(*net.TCPConn).CloseWrite()
		rest, err := io.ReadAll(br)
		if err != nil {
			got <- "origin: " + err.Error()
			return
		}
		got <- string(rest)
	}()
	return l.Addr().String(), got
}

// A client that uploads after the upstream has ended its response (and
// half-closed) gets its upload through, and its own half-close reaches the
// upstream, when the transport between the guest's forwarder and the gate
// cannot half-close, as on a Mac: the real forwarder and the real gate,
// over loopback TCP connections with CloseWrite hidden.
func TestUploadAfterResponseWithoutTransportHalfClose(t *testing.T) {
	for _, proto := range []string{"connect", "socks"} {
		t.Run(proto, func(t *testing.T) {
			origin, upload := halfCloseOrigin(t)
			g, err := New(Config{Allow: []string{"origin.test"}, MapHosts: []string{"origin.test=127.0.0.1"},
				Dialer: &redirectDialer{}, Resolver: fakeResolver{}})
			if err != nil {
				t.Fatal(err)
			}
			gl, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			serve, port := g.ServeHTTPProxy, api.PortEgressHTTP
			if proto == "socks" {
				serve, port = g.ServeSOCKS, api.PortEgressSOCKS
			}
			gateServed := make(chan error, 1)
			go func() { gateServed <- serve(noHalfCloseListener{gl}) }()
			t.Cleanup(func() {
				g.Close()
				<-gateServed
				checkNoGateGoroutines(t)
			})
			gateAddr := gl.Addr().String()
			dial := func(ctx context.Context, _ uint32) (net.Conn, error) {
				var d net.Dialer
				c, err := d.DialContext(ctx, "tcp", gateAddr)
				if err != nil {
					return nil, err
				}
				return noHalfClose{c}, nil
			}
			guestL, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			served := make(chan error, 1)
			go func() { served <- gegress.New(gegress.Config{Dial: dial}).Serve(ctx, guestL, port) }()
			t.Cleanup(func() {
				cancel()
				<-served
			})

			c, err := net.Dial("tcp", guestL.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			_, oport, _ := net.SplitHostPort(origin)
			br := bufio.NewReader(c)
			if proto == "connect" {
				fmt.Fprintf(c, "CONNECT origin.test:%s HTTP/1.1\r\nHost: origin.test:%s\r\n\r\n", oport, oport)
				resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
				if err != nil || resp.StatusCode != 200 {
					t.Fatalf("CONNECT: %v %v", resp, err)
				}
			} else {
				socksConnect(t, c, br, "origin.test", oport)
			}
			io.WriteString(c, "request\n")
			resp, err := io.ReadAll(br)
			if err != nil || string(resp) != "response" {
				t.Fatalf("client read %q, %v; want the response, then EOF", resp, err)
			}
			if _, err := io.WriteString(c, "upload after the response"); err != nil {
				t.Fatalf("write after the response: %v", err)
			}
			c.(*net.TCPConn).CloseWrite()
			select {
			case got := <-upload:
				if got != "upload after the response" {
					t.Fatalf("the upstream got %q after its half-close", got)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the client's half-close never reached the upstream")
			}
		})
	}
}

// socksConnect does a SOCKS5 CONNECT by name without authentication.
func socksConnect(t *testing.T, c net.Conn, br *bufio.Reader, host, port string) {
	t.Helper()
	var p int
	fmt.Sscan(port, &p)
	req := []byte{5, 1, 0, 5, 1, 0, 3, byte(len(host))}
	req = append(req, host...)
	req = append(req, byte(p>>8), byte(p))
	if _, err := c.Write(req); err != nil {
		t.Fatal(err)
	}
	reply := make([]byte, 12)
	if _, err := io.ReadFull(br, reply); err != nil || reply[1] != 0 || reply[3] != 0 {
		t.Fatalf("SOCKS: %x %v", reply, err)
	}
}
