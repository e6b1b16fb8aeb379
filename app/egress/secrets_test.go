package egress

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"golang.org/x/net/proxy"
)

const (
	testPH    = "airlock_ph_TOKEN_0123456789abcdef"
	testValue = "sk-live-REAL-VALUE-42"
	otherPH   = "airlock_ph_OTHER_fedcba9876543210"
)

func testSecrets() []Secret {
	return []Secret{
		{Name: "TOKEN", Hosts: []string{"api.test"}, Placeholder: testPH, Value: []byte(testValue)},
		{Name: "OTHER", Hosts: []string{"other.test"}, Header: "X-Api-Key: key={}", Placeholder: otherPH, Value: []byte("other-value")},
	}
}

func mustSet(t *testing.T, s []Secret) *secretSet {
	t.Helper()
	set, err := newSecretSet(s)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

func mustTarget(t *testing.T, host string) target {
	tg, err := newTarget(host, 443)
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

func TestCALoadCreateAndLeaf(t *testing.T) {
	dir := t.TempDir()
	ca, err := LoadCA(dir)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, CAKeyFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", fi.Mode(), err)
	}
	if bytes.Contains(ca.CertPEM(), []byte("PRIVATE")) {
		t.Fatal("CertPEM holds a key")
	}
	again, err := LoadCA(dir)
	if err != nil || !again.Certificate().Equal(ca.Certificate()) {
		t.Fatalf("reload: %v", err)
	}
	if k := ca.Certificate().PublicKey.(*ecdsa.PublicKey); k.Curve != elliptic.P256() {
		t.Fatal("not P-256")
	}
	leaf, err := ca.leaf("api.test")
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Certificate())
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{DNSName: "api.test", Roots: pool}); err != nil {
		t.Fatalf("leaf does not verify: %v", err)
	}
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{DNSName: "evil.test", Roots: pool}); err == nil {
		t.Fatal("leaf verifies for another host")
	}
	if l2, _ := ca.leaf("api.test"); l2 != leaf {
		t.Fatal("leaf not cached")
	}
	ipLeaf, err := ca.leaf("127.0.0.1")
	if err != nil || len(ipLeaf.Leaf.IPAddresses) != 1 {
		t.Fatalf("ip leaf: %v", err)
	}
	os.Chmod(filepath.Join(dir, CAKeyFile), 0o644)
	if _, err := LoadCA(dir); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("world-readable key accepted: %v", err)
	}
	os.Remove(filepath.Join(dir, CACertFile))
	if _, err := LoadCA(dir); err == nil {
		t.Fatal("key without certificate accepted")
	}
}

func TestSecretSetValidation(t *testing.T) {
	good := testSecrets()[0]
	for name, mod := range map[string]func(*Secret){
		"short placeholder": func(s *Secret) { s.Placeholder = "abc" },
		"odd placeholder":   func(s *Secret) { s.Placeholder = "airlock ph with spaces!" },
		"no hosts":          func(s *Secret) { s.Hosts = nil },
		"bad host":          func(s *Secret) { s.Hosts = []string{"*"} },
		"empty value":       func(s *Secret) { s.Value = nil },
		"template no {}":    func(s *Secret) { s.Header = "Authorization: Bearer" },
		"template two {}":   func(s *Secret) { s.Header = "Authorization: {}{}" },
		"template host":     func(s *Secret) { s.Header = "Host: {}" },
		"template no name":  func(s *Secret) { s.Header = ": {}" },
	} {
		s := good
		mod(&s)
		_, err := newSecretSet([]Secret{s})
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if strings.Contains(err.Error(), testValue) {
			t.Errorf("%s: error shows the value: %v", name, err)
		}
	}
	dup := good
	dup.Name = "DUP"
	dup.Placeholder = strings.ToUpper(good.Placeholder)
	if _, err := newSecretSet([]Secret{good, dup}); err == nil {
		t.Error("same placeholder (other case) accepted twice")
	}
}

func TestApplyPlaceholders(t *testing.T) {
	set := mustSet(t, testSecrets())
	req := func(uri string, hdr ...string) *http.Request {
		r := httptest.NewRequest("GET", uri, nil)
		r.Header = http.Header{}
		for i := 0; i+1 < len(hdr); i += 2 {
			r.Header.Add(hdr[i], hdr[i+1])
		}
		return r
	}
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("user:"+testPH))
	refused := []struct {
		name string
		r    *http.Request
		host string
	}{
		{"header to another host", req("/x", "Authorization", "Bearer "+testPH), "evil.test"},
		{"lower case", req("/x", "Authorization", "Bearer "+strings.ToLower(testPH)), "evil.test"},
		{"upper case", req("/x", "X-Anything", strings.ToUpper(testPH)), "evil.test"},
		{"in the query", req("/x?key=" + testPH), "evil.test"},
		{"in the path", req("/leak/" + testPH), "evil.test"},
		{"in a header name", req("/x", "X-"+testPH, "1"), "evil.test"},
		{"split across repeated headers", req("/x", "X-A", testPH[:10], "X-A", testPH[10:]), "evil.test"},
		{"basic credential", req("/x", "Authorization", basic), "evil.test"},
		{"secret of another host", req("/x", "X-Api-Key", otherPH), "api.test"},
		{"subdomain of the host", req("/x", "Authorization", testPH), "x.api.test"},
		{"percent-encoded in the query", req("/x?key=" + pctAll(testPH)), "evil.test"},
		{"percent-encoded in the path", req("/leak/" + pctAll(testPH[:5]) + testPH[5:]), "evil.test"},
		{"percent-encoded twice", req("/x?k=" + strings.ReplaceAll(pctAll(testPH), "%", "%25")), "evil.test"},
		{"percent-encoded in a header", req("/x", "X-Data", pctAll(testPH)), "evil.test"},
		{"percent-encoded, lower-case hex", req("/x?k=" + strings.ToLower(pctAll(testPH))), "evil.test"},
		{"percent-encoded inside Basic", req("/x", "Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("u:"+pctAll(testPH)))), "evil.test"},
		{"percent-encoded to its own host in plain text", req("/x?k=" + pctAll(testPH)), "plain.test"},
	}
	for _, c := range refused {
		_, _, err := set.apply(c.r, mustTarget(t, c.host), true)
		if err == nil {
			t.Errorf("%s: not refused", c.name)
		} else if strings.Contains(err.Error(), testValue) {
			t.Errorf("%s: refusal shows the value", c.name)
		}
	}
	// Plain HTTP: refused even to the right host.
	if _, _, err := set.apply(req("/x", "Authorization", "Bearer "+testPH), mustTarget(t, "api.test"), false); err == nil {
		t.Error("plain HTTP placeholder to its own host not refused")
	}

	r := req("/v1?key="+testPH+"&b=1", "Authorization", "Bearer "+strings.ToLower(testPH), "Proxy-Basic", basic)
	used, sent, err := set.apply(r, mustTarget(t, "api.test"), true)
	if err != nil || len(used) != 1 || used[0] != "TOKEN" {
		t.Fatalf("right host: used %v err %v", used, err)
	}
	if len(sent) != 1 || string(sent[0].from) != credentialOf(r.Header.Get("Proxy-Basic")) || string(sent[0].to) != credentialOf(basic) {
		t.Errorf("sent %q", sent)
	}
	if got := r.Header.Get("Authorization"); got != "Bearer "+testValue {
		t.Errorf("Authorization = %q", got)
	}
	if r.URL.RawQuery != "key="+testValue+"&b=1" {
		t.Errorf("query = %q", r.URL.RawQuery)
	}
	if raw, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(r.Header.Get("Proxy-Basic"), "Basic ")); string(raw) != "user:"+testValue {
		t.Errorf("basic = %q", raw)
	}

	r = req("/v1")
	used, _, err = set.apply(r, mustTarget(t, "other.test"), true)
	if err != nil || len(used) != 1 || r.Header.Get("X-Api-Key") != "key=other-value" {
		t.Fatalf("template: %v %v %q", used, err, r.Header)
	}
	// A secret with a template goes where the template says and nowhere
	// else: its placeholder elsewhere goes out as it is.
	obasic := "Basic " + base64.StdEncoding.EncodeToString([]byte("u:"+otherPH))
	r = req("/v1?key="+otherPH, "X-Api-Key", "key="+otherPH, "X-Echo", otherPH, "Authorization", obasic)
	used, _, err = set.apply(r, mustTarget(t, "other.test"), true)
	if err != nil || len(used) != 1 || r.Header.Get("X-Api-Key") != "key=other-value" || r.Header.Get("X-Echo") != otherPH ||
		r.Header.Get("Authorization") != obasic || r.URL.RawQuery != "key="+otherPH {
		t.Fatalf("template only: %v %v %q %q", used, err, r.Header, r.URL.RawQuery)
	}
	r = req("/v1", "Authorization", "Bearer nothing")
	if used, _, err := set.apply(r, mustTarget(t, "plain.test"), true); err != nil || used != nil || r.Header.Get("Authorization") != "Bearer nothing" {
		t.Fatalf("no placeholder: %v %v", used, err)
	}
}

// pctAll percent-encodes every byte of s.
func pctAll(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

func TestScanReaderHoldsBackSplitPlaceholder(t *testing.T) {
	set := mustSet(t, testSecrets())
	body := "0123456789" + strings.ToUpper(testPH) + "tail"
	var passed bytes.Buffer
	sr := newScanReader(iotest.OneByteReader(strings.NewReader(body)), set, func(*secret) bool { return false })
	_, err := io.Copy(&passed, sr)
	if err != errPlaceholderInBody || sr.found == nil || sr.found.Name != "TOKEN" {
		t.Fatalf("err %v found %v", err, sr.found)
	}
	if strings.Contains(strings.ToLower(passed.String()), testPH[:4]) {
		t.Fatalf("part of the placeholder passed: %q", passed.String())
	}
	clean := strings.Repeat("harmless body ", 10000)
	var out bytes.Buffer
	if _, err := io.Copy(&out, newScanReader(iotest.HalfReader(strings.NewReader(clean)), set, func(*secret) bool { return false })); err != nil || out.String() != clean {
		t.Fatalf("clean body changed: %v", err)
	}
	var ok bytes.Buffer
	if _, err := io.Copy(&ok, newScanReader(strings.NewReader(body), set, func(s *secret) bool { return s.Name == "TOKEN" })); err != nil || ok.String() != body {
		t.Fatalf("placeholder to its own host: %v", err)
	}
	// Percent-encoded, one byte at a time: nothing of it passes.
	form := "a=1&token=" + pctAll(testPH) + "&b=2"
	passed.Reset()
	sr = newScanReader(iotest.OneByteReader(strings.NewReader(form)), set, func(*secret) bool { return false })
	if _, err := io.Copy(&passed, sr); err != errPlaceholderInBody || sr.found == nil || sr.found.Name != "TOKEN" {
		t.Fatalf("percent-encoded: err %v found %v", err, sr.found)
	}
	if strings.Contains(passed.String(), "%") {
		t.Fatalf("part of the encoded placeholder passed: %q", passed.String())
	}
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
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: "test upstream CA"},
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
	tmpl := &x509.Certificate{SerialNumber: serial(), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
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
func credGate(t *testing.T) (tg *testGate, ca *CA, ports map[string]string) {
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
	sec = append(sec, Secret{Name: "BAD", Hosts: []string{"bad.test"}, Placeholder: "airlock_ph_BAD_000000000000000", Value: []byte("bad-value")})
	ca, err := LoadCA(t.TempDir())
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

func trustingClient(t *testing.T, tg *testGate, ca *CA, socks bool) *http.Client {
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
	ca, _ := LoadCA(t.TempDir())
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

// UpstreamRoots: nil (crypto/tls then loads the system's roots on first
// use) without files; the system's plus each file's certificates with
// them; a file without a certificate, or missing, is an error naming it.
func TestUpstreamRoots(t *testing.T) {
	if pool, err := UpstreamRoots(nil); pool != nil || err != nil {
		t.Fatalf("no files: %v, %v; want nil, nil", pool, err)
	}
	pki := newTestPKI(t)
	dir := t.TempDir()
	good := filepath.Join(dir, "corp.pem")
	os.WriteFile(good, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: pki.cert.Raw}), 0o644)
	pool, err := UpstreamRoots([]string{good})
	if err != nil || pool == nil {
		t.Fatalf("with a CA file: %v, %v", pool, err)
	}
	leaf := pki.server(t, "corp.test", http.NotFoundHandler()).Certificate()
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "corp.test"}); err != nil {
		t.Errorf("a server of the file's CA does not verify: %v", err)
	}
	bad := filepath.Join(dir, "notes.txt")
	os.WriteFile(bad, []byte("not a certificate"), 0o644)
	for _, f := range []string{bad, filepath.Join(dir, "missing.pem")} {
		if _, err := UpstreamRoots([]string{good, f}); err == nil || !strings.Contains(err.Error(), "upstream CA") {
			t.Errorf("%s: %v", f, err)
		}
	}
}
