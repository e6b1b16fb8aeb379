package egress

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/app/egress/intercept"
)

// streamOrigin is a raw loopback HTTP server: it reads one request head
// and body (Content-Length only), answers with a head for the framing
// ("length", "chunked" or "eof") and "first\n", waits for more, then sends
// "second\n" and ends the response. It reports the request body's first
// six bytes on gotFirst as soon as they arrive.
func streamOrigin(t *testing.T, framing string, more <-chan struct{}, gotFirst chan<- string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		br := bufio.NewReader(c)
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		if req.ContentLength > 0 {
			first := make([]byte, 6)
			if _, err := io.ReadFull(req.Body, first); err != nil {
				return
			}
			gotFirst <- string(first)
			io.Copy(io.Discard, req.Body)
		}
		switch framing {
		case "length":
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 13\r\n\r\nfirst\n")
		case "chunked":
			io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nfirst\n\r\n")
		case "eof":
			io.WriteString(c, "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nfirst\n")
		}
		<-more
		switch framing {
		case "chunked":
			io.WriteString(c, "7\r\nsecond\n\r\n0\r\n\r\n")
		default:
			io.WriteString(c, "second\n")
		}
	}()
	return l.Addr().String()
}

// A plain-HTTP response body is passed on as it comes, whatever its
// framing: what the upstream sent reaches the guest before the upstream
// sends more. So is a request body on its way up.
func TestHTTPStreamsBodies(t *testing.T) {
	for _, framing := range []string{"length", "chunked", "eof"} {
		t.Run(framing, func(t *testing.T) {
			more, gotFirst := make(chan struct{}), make(chan string, 1)
			port := portOf(t, streamOrigin(t, framing, more, gotFirst))
			tg := startGate(t, Config{Allow: []string{"origin.test"}, MapHosts: []string{"origin.test=127.0.0.1"}})
			c, err := net.Dial("tcp", tg.httpAddr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			fmt.Fprintf(c, "POST http://origin.test:%s/ HTTP/1.1\r\nHost: origin.test:%s\r\nContent-Length: 13\r\n\r\nfirst\n", port, port)
			select {
			case got := <-gotFirst:
				if got != "first\n" {
					t.Fatalf("origin got %q", got)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the start of the request body did not reach the origin")
			}
			io.WriteString(c, "second\n")
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			first := make([]byte, 6)
			if _, err := io.ReadFull(resp.Body, first); err != nil || string(first) != "first\n" {
				t.Fatalf("first piece: %q %v", first, err)
			}
			close(more)
			rest, err := io.ReadAll(resp.Body)
			if err != nil || string(rest) != "second\n" {
				t.Fatalf("rest: %q %v", rest, err)
			}
			d := wantDecision(t, tg.Gate, ProtoHTTP, "origin.test", ReasonAllowedByRule)
			if d.BytesUp < 13 || d.BytesDown < 13 {
				t.Fatalf("decision %+v", d)
			}
		})
	}
}

// The same through an inspected tunnel, with a net/http origin: a length
// and a chunked response.
func TestInspectedStreamsBodies(t *testing.T) {
	for _, length := range []bool{true, false} {
		t.Run(fmt.Sprint("length=", length), func(t *testing.T) {
			pki := newTestPKI(t)
			more := make(chan struct{})
			var once sync.Once
			release := func() { once.Do(func() { close(more) }) }
			srv := pki.server(t, "stream.test", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if length {
					w.Header().Set("Content-Length", "13")
				}
				io.WriteString(w, "first\n")
				w.(http.Flusher).Flush()
				<-more
				io.WriteString(w, "second\n")
			}))
			ca, err := intercept.LoadCA(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(release) // before the server's Close, which waits for the handler
			tg := startGate(t, Config{Allow: []string{"stream.test"}, MapHosts: []string{"stream.test=127.0.0.1"}, CA: ca, Inspect: true, UpstreamRoots: pki.pool})
			pool := x509.NewCertPool()
			pool.AddCert(ca.Certificate())
			tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, DisableKeepAlives: true,
				Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: tg.httpAddr})}
			defer tr.CloseIdleConnections()
			c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
			resp, err := c.Get("https://stream.test:" + portOf(t, srv.Listener.Addr().String()) + "/")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			first := make([]byte, 6)
			if _, err := io.ReadFull(resp.Body, first); err != nil || string(first) != "first\n" {
				t.Fatalf("first piece: %q %v", first, err)
			}
			release()
			rest, err := io.ReadAll(resp.Body)
			if err != nil || string(rest) != "second\n" {
				t.Fatalf("rest: %q %v", rest, err)
			}
		})
	}
}

// writeLog records each Write.
type writeLog struct {
	bytes.Buffer
	writes []int
}

func (w *writeLog) Write(p []byte) (int, error) {
	w.writes = append(w.writes, len(p))
	return w.Buffer.Write(p)
}

// writeResponse sends a head in one write and a body in copyConn's steps,
// byte-exact and counted, whatever the framing.
func TestWriteResponseSteps(t *testing.T) {
	const size = 1<<20 + 5
	body := blob[:size]
	for _, framing := range []string{"length", "chunked", "eof", "none"} {
		t.Run(framing, func(t *testing.T) {
			resp := &http.Response{StatusCode: 200, ProtoMajor: 1, ProtoMinor: 1, Header: http.Header{"X-A": {"b"}},
				Body: io.NopCloser(struct{ io.Reader }{bytes.NewReader(body)}), ContentLength: size}
			switch framing {
			case "chunked":
				resp.ContentLength, resp.TransferEncoding = -1, []string{"chunked"}
			case "eof":
				resp.ContentLength, resp.Close = -1, true
			case "none":
				resp.Body, resp.ContentLength = http.NoBody, 0
			}
			var w writeLog
			n, err := writeResponse(&w, resp)
			if err != nil || n != int64(w.Len()) {
				t.Fatalf("writeResponse: %d %v; wrote %d", n, err, w.Len())
			}
			steps := (size + 256<<10 - 1) / (256 << 10)
			max := 1 + steps + 1 // head, body steps, end
			if framing == "chunked" {
				// Each step's size line, and the line end after it,
				// go on their own: nothing waits while the gate reads.
				max = 1 + 3*steps + 1
			}
			if framing == "none" {
				max = 1
			}
			if len(w.writes) > max {
				t.Errorf("%d writes %v; want at most %d", len(w.writes), w.writes, max)
			}
			got, err := http.ReadResponse(bufio.NewReader(&w.Buffer), nil)
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(got.Body)
			want := body
			if framing == "none" {
				want = nil
			}
			if err != nil || !bytes.Equal(b, want) || got.Header.Get("X-A") != "b" {
				t.Fatalf("read back %d bytes, %v, %v", len(b), err, got.Header)
			}
		})
	}
}

// A failing writer ends writeResponse with its error, counting what went.
func TestWriteResponseError(t *testing.T) {
	resp := &http.Response{StatusCode: 200, ProtoMajor: 1, ProtoMinor: 1, Header: http.Header{},
		Body: io.NopCloser(strings.NewReader(strings.Repeat("x", 1<<20))), ContentLength: 1 << 20}
	w := &limitWriter{left: 1000}
	n, err := writeResponse(w, resp)
	if err == nil || n != 1000 {
		t.Fatalf("writeResponse: %d %v; want 1000 and an error", n, err)
	}
}

type limitWriter struct{ left int }

func (w *limitWriter) Write(p []byte) (int, error) {
	if len(p) > w.left {
		n := w.left
		w.left = 0
		return n, io.ErrClosedPipe
	}
	w.left -= len(p)
	return len(p), nil
}
