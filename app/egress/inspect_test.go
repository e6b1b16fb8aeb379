package egress

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/app/egress/intercept"
	"golang.org/x/net/proxy"
)

const (
	testPH    = "airlock_ph_TOKEN_0123456789abcdef"
	testValue = "sk-live-REAL-VALUE-42"
	otherPH   = "airlock_ph_OTHER_fedcba9876543210"
)

func testSecrets() []intercept.Secret {
	return []intercept.Secret{
		{Name: "TOKEN", Hosts: []string{"api.test"}, Placeholder: testPH, Value: []byte(testValue)},
		{Name: "OTHER", Hosts: []string{"other.test"}, Header: "X-Api-Key: key={}", Placeholder: otherPH, Value: []byte("other-value")},
	}
}

func testSerial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n.Add(n, big.NewInt(1))
}

// testPKI is a private CA standing for the public roots real servers chain to.
type testPKI struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: testSerial(), Subject: pkix.Name{CommonName: "test upstream CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testPKI{cert: cert, key: key, pool: pool}
}

func (p *testPKI) server(t *testing.T, name string, h http.Handler) *httptest.Server {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: testSerial(), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.cert, &key.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewUnstartedServer(h)
	s.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	s.StartTLS()
	t.Cleanup(s.Close)
	return s
}

// echoHeaders answers with the request's URI and headers, and the SHA-256
// of the Authorization header (so a test sees what arrived even where the
// gate redacts the echo).
var echoHeaders = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	fmt.Fprintf(w, "auth-sha=%x\n", sha256.Sum256([]byte(r.Header.Get("Authorization"))))
	fmt.Fprintf(w, "uri-sha=%x\n", sha256.Sum256([]byte(r.RequestURI)))
	fmt.Fprintf(w, "apikey-sha=%x\n", sha256.Sum256([]byte(r.Header.Get("X-Api-Key"))))
	fmt.Fprintf(w, "uri=%s\n", r.RequestURI)
	r.Header.Write(w)
	io.Copy(w, r.Body)
})

// credGate starts a gate with a CA and the test secrets, and servers for
// api.test and other.test (signed by the test PKI), plain.test (no secret),
// and bad.test (signed by an unknown CA).
func credGate(t *testing.T) (tg *testGate, ca *intercept.CA, ports map[string]string) {
	pki := newTestPKI(t)
	ports = map[string]string{}
	var pins []string
	for _, n := range []string{"api.test", "other.test", "plain.test"} {
		s := pki.server(t, n, echoHeaders)
		ports[n] = portOf(t, s.Listener.Addr().String())
		pins = append(pins, n+"=127.0.0.1")
	}
	bad := newTestPKI(t).server(t, "bad.test", echoHeaders)
	ports["bad.test"] = portOf(t, bad.Listener.Addr().String())
	pins = append(pins, "bad.test=127.0.0.1")
	sec := testSecrets()
	sec = append(sec, intercept.Secret{Name: "BAD", Hosts: []string{"bad.test"}, Placeholder: "airlock_ph_BAD_000000000000000", Value: []byte("bad-value")})
	ca, err := intercept.LoadCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var allow []string
	for _, p := range pins {
		n, _, _ := strings.Cut(p, "=")
		allow = append(allow, n)
	}
	tg = startGate(t, Config{Allow: allow, MapHosts: pins, CA: ca, Secrets: sec, UpstreamRoots: pki.pool})
	return tg, ca, ports
}

func trustingClient(t *testing.T, tg *testGate, ca *intercept.CA, socks bool) *http.Client {
	pool := x509.NewCertPool()
	pool.AddCert(ca.Certificate())
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, DisableKeepAlives: true}
	if socks {
		d, err := proxy.SOCKS5("tcp", tg.socksAddr, nil, proxy.Direct)
		if err != nil {
			t.Fatal(err)
		}
		tr.DialContext = d.(proxy.ContextDialer).DialContext
	} else {
		tr.Proxy = http.ProxyURL(&url.URL{Scheme: "http", Host: tg.httpAddr})
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func TestGateAddsSecretOnlyForItsHost(t *testing.T) {
	tg, ca, ports := credGate(t)
	for _, socks := range []bool{false, true} {
		c := trustingClient(t, tg, ca, socks)
		get := func(host, path string, hdr ...string) (*http.Response, string) {
			t.Helper()
			req, _ := http.NewRequest("GET", "https://"+host+":"+ports[host]+path, nil)
			for i := 0; i+1 < len(hdr); i += 2 {
				req.Header.Set(hdr[i], hdr[i+1])
			}
			resp, err := c.Do(req)
			if err != nil {
				return nil, err.Error()
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp, string(b)
		}
		resp, body := get("api.test", "/v1?k="+testPH, "Authorization", "Bearer "+testPH)
		if resp == nil || resp.StatusCode != 200 || !strings.Contains(body, fmt.Sprintf("auth-sha=%x", sha256.Sum256([]byte("Bearer "+testValue)))) ||
			!strings.Contains(body, fmt.Sprintf("uri-sha=%x", sha256.Sum256([]byte("/v1?k="+testValue)))) {
			t.Fatalf("socks=%v right host: %v %q", socks, resp, body)
		}
		// The server echoed what it got: the guest sees the placeholder.
		if strings.Contains(body, testValue) || !strings.Contains(body, "Authorization: Bearer "+testPH) || !strings.Contains(body, "uri=/v1?k="+testPH) {
			t.Fatalf("socks=%v the echo was not redacted: %q", socks, body)
		}
		d := waitDecision(t, tg.Gate, func(d Decision) bool { return d.Host == "api.test" && len(d.Secrets) == 1 })
		if d.Secrets[0] != "TOKEN" || d.Action != ActionAllow {
			t.Fatalf("logged %+v", d)
		}
		resp, body = get("other.test", "/v1", "Authorization", "Bearer "+testPH)
		if resp == nil || resp.StatusCode != 403 || strings.Contains(body, testValue) || !strings.Contains(body, "placeholder-refused") {
			t.Fatalf("socks=%v other host: %v %q", socks, resp, body)
		}
		wantDecision(t, tg.Gate, protoOf(socks), "other.test", ReasonPlaceholder)
		// The header template of OTHER is set without any placeholder.
		resp, body = get("other.test", "/v1")
		if resp == nil || resp.StatusCode != 200 || !strings.Contains(body, fmt.Sprintf("apikey-sha=%x", sha256.Sum256([]byte("key=other-value")))) ||
			strings.Contains(body, "other-value") || !strings.Contains(body, "X-Api-Key: key="+otherPH) {
			t.Fatalf("socks=%v template: %v %q", socks, resp, body)
		}
		resp, body = get("bad.test", "/v1")
		if resp != nil || strings.Contains(body, "bad-value") {
			t.Fatalf("socks=%v bad certificate: %v %q", socks, resp, body)
		}
		bd := wantDecision(t, tg.Gate, protoOf(socks), "bad.test", ReasonUpstreamCert)
		if !strings.Contains(bd.Detail, "certificate") {
			t.Errorf("bad cert detail %q", bd.Detail)
		}
	}
	// A body carrying the placeholder to another inspected host is cut.
	c := trustingClient(t, tg, ca, false)
	resp, err := c.Post("https://other.test:"+ports["other.test"]+"/p", "text/plain", strings.NewReader(strings.Repeat("x", 100000)+testPH))
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 403 || strings.Contains(string(b), testPH) {
			t.Fatalf("body to other host: %d %q", resp.StatusCode, b)
		}
	}
	waitDecision(t, tg.Gate, func(d Decision) bool {
		return d.Host == "other.test" && d.Reason == ReasonPlaceholder && strings.Contains(d.Detail, "body")
	})
	for _, d := range tg.Recent() {
		if strings.Contains(fmt.Sprint(d), testValue) {
			t.Fatalf("decision shows the value: %+v", d)
		}
	}
}

func protoOf(socks bool) Protocol {
	if socks {
		return ProtoSOCKS
	}
	return ProtoConnect
}

func TestGateSNIMismatchAndPlainHTTP(t *testing.T) {
	tg, ca, ports := credGate(t)
	// SNI naming another host than the CONNECT target is refused.
	conn, err := net.Dial("tcp", tg.httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "CONNECT api.test:%s HTTP/1.1\r\nHost: api.test:%s\r\n\r\n", ports["api.test"], ports["api.test"])
	buf := make([]byte, 4096)
	n, _ := conn.Read(buf)
	if !strings.Contains(string(buf[:n]), " 200 ") {
		t.Fatalf("CONNECT: %q", buf[:n])
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Certificate())
	tc := tls.Client(conn, &tls.Config{ServerName: "evil.test", RootCAs: pool})
	if err := tc.Handshake(); err == nil {
		t.Fatal("handshake with another SNI succeeded")
	}
	wantDecision(t, tg.Gate, ProtoConnect, "api.test", ReasonHostMismatch)

	// Host header naming another host inside the tunnel is refused.
	c := trustingClient(t, tg, ca, false)
	req, _ := http.NewRequest("GET", "https://api.test:"+ports["api.test"]+"/", nil)
	req.Host = "evil.test"
	if resp, err := c.Do(req); err == nil {
		resp.Body.Close()
		if resp.StatusCode != 400 {
			t.Fatalf("Host mismatch: %d", resp.StatusCode)
		}
	}
	waitDecision(t, tg.Gate, func(d Decision) bool {
		return d.Host == "api.test" && d.Reason == ReasonHostMismatch && strings.Contains(d.Detail, "Host header")
	})

	// Plain HTTP with a placeholder is refused, even to the secret's host.
	plain := httptest.NewServer(echoHeaders)
	defer plain.Close()
	pc := proxyClient(t, tg, "", nil)
	for _, host := range []string{"api.test", "plain.test"} {
		req, _ := http.NewRequest("GET", "http://"+host+":"+portOf(t, plain.Listener.Addr().String())+"/", nil)
		req.Header.Set("X-Key", testPH)
		resp, err := pc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 403 || strings.Contains(string(b), testValue) {
			t.Fatalf("plain HTTP to %s: %d %q", host, resp.StatusCode, b)
		}
		wantDecision(t, tg.Gate, ProtoHTTP, host, ReasonPlaceholder)
	}
	resp, err := pc.Post("http://plain.test:"+portOf(t, plain.Listener.Addr().String())+"/", "text/plain", strings.NewReader("a"+testPH))
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(b), testPH) {
			t.Fatalf("plain body passed: %q", b)
		}
	}
	waitDecision(t, tg.Gate, func(d Decision) bool {
		return d.Host == "plain.test" && d.Reason == ReasonPlaceholder && strings.Contains(d.Detail, "body")
	})
	// Hosts without secrets stay opaque tunnels: the gate presents no
	// certificate of its own there.
	c2 := trustingClient(t, tg, ca, false)
	if _, err := c2.Get("https://plain.test:" + ports["plain.test"] + "/"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("plain.test was not an opaque tunnel: %v", err)
	}
	tg.SetInspect(true)
	if resp, err := c2.Get("https://plain.test:" + ports["plain.test"] + "/"); err != nil {
		t.Fatalf("inspected plain.test: %v", err)
	} else {
		resp.Body.Close()
	}
}

func TestUpstreamProxyChaining(t *testing.T) {
	pki := newTestPKI(t)
	srv := pki.server(t, "api.test", echoHeaders)
	// A tiny corporate proxy: CONNECT only, counts what it tunnels.
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pl.Close()
	connects := make(chan string, 4)
	go func() {
		for {
			c, err := pl.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				req, err := http.ReadRequest(bufioReader(c))
				if err != nil || req.Method != "CONNECT" || req.Header.Get("Proxy-Authorization") == "" {
					io.WriteString(c, "HTTP/1.1 407 Proxy Authentication Required\r\n\r\n")
					return
				}
				connects <- req.Host
				u, err := net.Dial("tcp", req.Host)
				if err != nil {
					return
				}
				defer u.Close()
				io.WriteString(c, "HTTP/1.1 200 OK\r\n\r\n")
				go io.Copy(u, c)
				io.Copy(c, u)
			}()
		}
	}()
	ca, _ := intercept.LoadCA(t.TempDir())
	tg := startGate(t, Config{Allow: []string{"api.test"}, MapHosts: []string{"api.test=127.0.0.1"}, CA: ca, Secrets: testSecrets()[:1],
		UpstreamRoots: pki.pool, UpstreamProxy: "http://u:p@" + pl.Addr().String(), Dialer: &net.Dialer{}})
	c := trustingClient(t, tg, ca, false)
	req, _ := http.NewRequest("GET", "https://api.test:"+portOf(t, srv.Listener.Addr().String())+"/", nil)
	req.Header.Set("Authorization", testPH)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(b), fmt.Sprintf("auth-sha=%x", sha256.Sum256([]byte(testValue)))) {
		t.Fatalf("through the upstream proxy: %q", b)
	}
	if got := <-connects; got != srv.Listener.Addr().String() {
		t.Fatalf("proxy asked for %s", got)
	}
	if _, err := ParseUpstreamProxy("socks5://x:1"); err == nil {
		t.Fatal("socks upstream accepted")
	}
}

func bufioReader(c net.Conn) *bufio.Reader { return bufio.NewReader(c) }

// echoAll answers with everything the request carried: its credential
// headers in a Location header and in the body, the body written in
// pieces of 3 bytes (so values straddle writes and chunks), gzip-encoded
// when asked by ?gzip.
var echoAll = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	var all strings.Builder
	fmt.Fprintf(&all, "uri=%s\n", r.RequestURI)
	r.Header.Write(&all)
	w.Header().Set("Location", "https://elsewhere.test/?auth="+url.QueryEscape(r.Header.Get("Authorization"))+"&key="+r.Header.Get("X-Api-Key"))
	w.Header().Set("X-Echo", r.Header.Get("Authorization"))
	var out io.Writer = w
	if r.URL.Query().Has("gzip") {
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		defer zw.Close()
		out = zw
	}
	w.WriteHeader(http.StatusBadRequest) // an error page that shows the input
	s := all.String()
	for i := 0; i < len(s); i += 3 {
		io.WriteString(out, s[i:min(i+3, len(s))])
		if f, ok := out.(http.Flusher); ok {
			f.Flush()
		}
	}
})

// TestGateRedactsEchoes: servers of a secret's hosts that echo what they
// received (Location, other headers, an error page, gzip) hand the guest
// the placeholder, never the value, through CONNECT and SOCKS; the tunnel's
// decision says which secret was echoed.
func TestGateRedactsEchoes(t *testing.T) {
	pki := newTestPKI(t)
	ports := map[string]string{}
	var allow, pins []string
	for _, n := range []string{"api.test", "other.test"} {
		s := pki.server(t, n, echoAll)
		ports[n] = portOf(t, s.Listener.Addr().String())
		allow, pins = append(allow, n), append(pins, n+"=127.0.0.1")
	}
	ca, err := intercept.LoadCA(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tg := startGate(t, Config{Allow: allow, MapHosts: pins, CA: ca, Secrets: testSecrets(), UpstreamRoots: pki.pool})
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("me:"+testPH))
	cases := []struct {
		host, path string
		hdr        []string
		name       string
	}{
		{"api.test", "/e?q=" + testPH, []string{"Authorization", "Bearer " + testPH}, "TOKEN"},
		{"api.test", "/e?gzip", []string{"Authorization", "Bearer " + testPH}, "TOKEN"},
		{"api.test", "/basic", []string{"Authorization", basic}, "TOKEN"},
		{"other.test", "/t", nil, "OTHER"},
		{"other.test", "/t?gzip", nil, "OTHER"},
	}
	for _, socks := range []bool{false, true} {
		c := trustingClient(t, tg, ca, socks)
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
		for _, tc := range cases {
			seq := len(tg.Recent())
			req, _ := http.NewRequest("GET", "https://"+tc.host+":"+ports[tc.host]+tc.path, nil)
			for i := 0; i+1 < len(tc.hdr); i += 2 {
				req.Header.Set(tc.hdr[i], tc.hdr[i+1])
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatalf("socks=%v %s%s: %v", socks, tc.host, tc.path, err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var head bytes.Buffer
			resp.Header.Write(&head)
			seen := resp.Status + head.String() + string(b)
			for _, v := range []string{testValue, "other-value", url.QueryEscape(testValue), base64.StdEncoding.EncodeToString([]byte("me:" + testValue))} {
				if strings.Contains(seen, v) {
					t.Fatalf("socks=%v %s%s: the guest got %q:\n%s", socks, tc.host, tc.path, v, seen)
				}
			}
			if resp.StatusCode != 400 || tc.path != "/basic" && (!strings.Contains(resp.Header.Get("Location"), "airlock_ph_") || !strings.Contains(string(b), "airlock_ph_")) {
				t.Fatalf("socks=%v %s%s: the echo did not come through:\n%s", socks, tc.host, tc.path, seen)
			}
			if tc.path == "/basic" && resp.Header.Get("X-Echo") != basic {
				t.Fatalf("Basic echo %q; want the guest's own %q", resp.Header.Get("X-Echo"), basic)
			}
			d := waitDecision(t, tg.Gate, func(d Decision) bool { return d.Seq > uint64(seq) && d.Host == tc.host })
			if d.Action != ActionAllow || !strings.Contains(d.Detail, "value of secret "+tc.name) || strings.Contains(fmt.Sprint(d), testValue) {
				t.Fatalf("socks=%v %s%s: logged %+v", socks, tc.host, tc.path, d)
			}
		}
	}
}

// TestPlainHTTPFromASecretsHostIsRedacted: a secret's host that holds the
// value (sent to it earlier over HTTPS) and serves it over plain HTTP
// hands the guest the placeholder.
func TestPlainHTTPFromASecretsHostIsRedacted(t *testing.T) {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", "/next?token="+testValue)
		fmt.Fprintf(w, "stored: %s", testValue)
	}))
	defer s.Close()
	srv := s.Listener.Addr().String()
	ca, _ := intercept.LoadCA(t.TempDir())
	tg := startGate(t, Config{Allow: []string{"api.test"}, MapHosts: []string{"api.test=127.0.0.1"}, CA: ca, Secrets: testSecrets()})
	resp, body := rawRequest(t, tg.httpAddr, "GET http://api.test:"+portOf(t, srv)+"/note HTTP/1.1\r\nHost: api.test:"+portOf(t, srv)+"\r\n\r\n")
	if resp.StatusCode != 200 || body != "stored: "+testPH || resp.Header.Get("Location") != "/next?token="+testPH {
		t.Fatalf("%s %q %q", resp.Status, resp.Header.Get("Location"), body)
	}
	d := wantDecision(t, tg.Gate, ProtoHTTP, "api.test", ReasonAllowedByRule)
	if !strings.Contains(d.Detail, "value of secret TOKEN (2 times)") {
		t.Fatalf("logged %+v", d)
	}
}
