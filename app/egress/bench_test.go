package egress

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/relaytest"
)

// BenchmarkDownload measures, in the same run and in alternating rounds, a
// loopback download direct from a TCP server, through two bare relays
// (accept, dial, copy both ways: one copying through a 256 KiB buffer, one
// splicing) and through the gate (CONNECT and SOCKS5). It reports each as
// MB/s and the gate's throughput as a ratio of the direct one and of the
// copying relay, the best a user-space relay does: a relay is a third
// busy party on the same cores, so direct is out of its reach.
func BenchmarkDownload(b *testing.B) {
	const size = 32 << 20
	chunk := make([]byte, 1<<20)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				for sent := 0; sent < size; sent += len(chunk) {
					if _, err := c.Write(chunk); err != nil {
						return
					}
				}
			}()
		}
	}()
	g, err := New(Config{Allow: []string{"origin.test"}, MapHosts: []string{"origin.test=127.0.0.1"}})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	hl, _ := net.Listen("tcp", "127.0.0.1:0")
	sl, _ := net.Listen("tcp", "127.0.0.1:0")
	go g.ServeHTTPProxy(hl)
	go g.ServeSOCKS(sl)
	port := l.Addr().(*net.TCPAddr).Port
	copyL := relaytest.Bare(b, l.Addr().String(), false)
	spliceL := relaytest.Bare(b, l.Addr().String(), true)

	dialer := func(addr string) func() (net.Conn, io.Reader) {
		return func() (net.Conn, io.Reader) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				b.Fatal(err)
			}
			return c, c
		}
	}
	connect := func() (net.Conn, io.Reader) {
		c, err := net.Dial("tcp", hl.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		fmt.Fprintf(c, "CONNECT origin.test:%d HTTP/1.1\r\n\r\n", port)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil || resp.StatusCode != 200 {
			b.Fatalf("CONNECT: %v %v", resp, err)
		}
		return c, br
	}
	socks := func() (net.Conn, io.Reader) {
		c, err := net.Dial("tcp", sl.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		req := []byte{5, 1, 0, 5, 1, 0, 3, 11}
		req = append(req, "origin.test"...)
		req = append(req, byte(port>>8), byte(port))
		c.Write(req)
		reply := make([]byte, 12)
		if _, err := io.ReadFull(c, reply); err != nil || reply[3] != 0 {
			b.Fatalf("SOCKS: %x %v", reply, err)
		}
		return c, c
	}
	fetch := func(open func() (net.Conn, io.Reader)) time.Duration {
		start := time.Now()
		c, r := open()
		n, err := io.Copy(io.Discard, r)
		c.Close()
		if err != nil || n != size {
			b.Fatalf("read %d bytes: %v", n, err)
		}
		return time.Since(start)
	}
	var tDirect, tCopy, tSplice, tConnect, tSOCKS time.Duration
	b.SetBytes(size)
	for b.Loop() {
		tDirect += fetch(dialer(l.Addr().String()))
		tCopy += fetch(dialer(copyL.Addr().String()))
		tSplice += fetch(dialer(spliceL.Addr().String()))
		tConnect += fetch(connect)
		tSOCKS += fetch(socks)
	}
	mbps := func(d time.Duration) float64 { return float64(b.N) * size / d.Seconds() / 1e6 }
	b.ReportMetric(mbps(tDirect), "direct-MB/s")
	b.ReportMetric(mbps(tCopy), "relay-MB/s")
	b.ReportMetric(mbps(tSplice), "splice-relay-MB/s")
	b.ReportMetric(mbps(tConnect), "connect-MB/s")
	b.ReportMetric(mbps(tSOCKS), "socks-MB/s")
	b.ReportMetric(tDirect.Seconds()/tConnect.Seconds(), "connect/direct")
	b.ReportMetric(tDirect.Seconds()/tSOCKS.Seconds(), "socks/direct")
	b.ReportMetric(tCopy.Seconds()/tConnect.Seconds(), "connect/relay")
	b.ReportMetric(tCopy.Seconds()/tSOCKS.Seconds(), "socks/relay")
	b.ReportMetric(tDirect.Seconds()/tCopy.Seconds(), "relay/direct")
}

// BenchmarkPlainHTTP measures, in the same run and in alternating rounds, a
// loopback GET of a body with a length and a chunked one, direct from a
// net/http server and through the gate's plain-HTTP proxy, and reports the
// gate's throughput as a ratio of the direct one.
func BenchmarkPlainHTTP(b *testing.B) {
	const size = 32 << 20
	chunk := make([]byte, 1<<20)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/length" {
			w.Header().Set("Content-Length", fmt.Sprint(size))
		}
		for sent := 0; sent < size; sent += len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})}
	go srv.Serve(l)
	defer srv.Close()
	g, err := New(Config{Allow: []string{"origin.test"}, MapHosts: []string{"origin.test=127.0.0.1"}})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	hl, _ := net.Listen("tcp", "127.0.0.1:0")
	go g.ServeHTTPProxy(hl)
	port := l.Addr().(*net.TCPAddr).Port
	fetch := func(addr, target string) time.Duration {
		start := time.Now()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: origin.test:%d\r\n\r\n", target, port)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		if err != nil || n != size {
			b.Fatalf("read %d bytes: %v", n, err)
		}
		return time.Since(start)
	}
	var tDirect, tGate [2]time.Duration
	b.SetBytes(2 * size)
	for b.Loop() {
		for i, path := range []string{"/length", "/chunked"} {
			tDirect[i] += fetch(l.Addr().String(), path)
			tGate[i] += fetch(hl.Addr().String(), fmt.Sprintf("http://origin.test:%d%s", port, path))
		}
	}
	for i, name := range []string{"length", "chunked"} {
		b.ReportMetric(float64(b.N)*size/tGate[i].Seconds()/1e6, name+"-MB/s")
		b.ReportMetric(tDirect[i].Seconds()/tGate[i].Seconds(), name+"/direct")
	}
}
