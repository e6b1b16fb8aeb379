package egress

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// blob is deterministic test content.
var blob = func() []byte {
	b := make([]byte, 1<<20+123)
	r := rand.NewChaCha8([32]byte{1})
	r.Read(b)
	return b
}()

// origin serves /blob, /echo (request headers back as text) and /post
// (the request body back).
func origin() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/blob", func(w http.ResponseWriter, r *http.Request) { w.Write(blob) })
	mux.HandleFunc("/echo", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "host=%s uri=%s\n", r.Host, r.RequestURI)
		r.Header.Write(w)
	})
	mux.HandleFunc("/post", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body) // net/http servers are not full duplex
		w.Write(b)
	})
	return mux
}

// proxyClient is an HTTP client using the gate as its proxy with a task's
// credential (no credential when task is "").
func proxyClient(t *testing.T, tg *testGate, task string, tlsFrom *httptest.Server) *http.Client {
	t.Helper()
	u := &url.URL{Scheme: "http", Host: tg.httpAddr}
	if task != "" {
		user, pass := tg.Credentials(task)
		u.User = url.UserPassword(user, pass)
	}
	tr := &http.Transport{Proxy: http.ProxyURL(u), DisableKeepAlives: false}
	if tlsFrom != nil {
		tr.TLSClientConfig = tlsFrom.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func get(t *testing.T, c *http.Client, u string) (*http.Response, []byte) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: body: %v", u, err)
	}
	return resp, b
}

func TestHTTPAbsoluteURI(t *testing.T) {
	srv := httptest.NewServer(origin())
	defer srv.Close()
	tg := startGate(t, Config{Allow: []string{"origin.test"}, MapHosts: []string{"origin.test=127.0.0.1"}})
	c := proxyClient(t, tg, "task-1", nil)
	port := portOf(t, srv.Listener.Addr().String())

	resp, body := get(t, c, "http://origin.test:"+port+"/blob")
	if resp.StatusCode != 200 || !bytes.Equal(body, blob) {
		t.Fatalf("GET /blob: %s, %d bytes; want 200 and the blob", resp.Status, len(body))
	}
	d := wantDecision(t, tg.Gate, ProtoHTTP, "origin.test", ReasonAllowedByRule)
	if d.Task != "task-1" || d.Action != ActionAllow || d.Addr != "127.0.0.1" || d.Rule != "origin.test, map-host origin.test=127.0.0.1" ||
		d.BytesDown < int64(len(blob)) || d.BytesUp == 0 || d.Port == 0 {
		t.Fatalf("decision %+v", d)
	}

	// Hop-by-hop headers and the proxy credential never reach the origin.
	req, _ := http.NewRequest("GET", "http://origin.test:"+port+"/echo?q=1", nil)
	req.Header.Set("Connection", "X-Hop")
	req.Header.Set("X-Hop", "secret")
	req.Header.Set("Keep-Alive", "timeout=5")
	req.Header.Set("X-End", "kept")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	echo, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, bad := range []string{"X-Hop", "Keep-Alive", "Proxy-Authorization", "Proxy-Connection"} {
		if strings.Contains(string(echo), bad) {
			t.Errorf("origin saw %s:\n%s", bad, echo)
		}
	}
	if !strings.Contains(string(echo), "X-End: kept") || !strings.Contains(string(echo), "uri=/echo?q=1") ||
		!strings.Contains(string(echo), "host=origin.test:"+port) {
		t.Errorf("origin saw:\n%s", echo)
	}

	// A body, chunked and with a length, goes through.
	for _, chunked := range []bool{false, true} {
		var r io.Reader = bytes.NewReader(blob[:100000])
		if chunked {
			r = io.MultiReader(r) // unknown length: chunked
		}
		resp, err := c.Post("http://origin.test:"+port+"/post", "application/octet-stream", r)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !bytes.Equal(got, blob[:100000]) {
			t.Fatalf("POST chunked=%v: got %d bytes back", chunked, len(got))
		}
	}
}

func TestHTTPKeepAliveEachRequestDecided(t *testing.T) {
	srv := httptest.NewServer(origin())
	defer srv.Close()
	tg := startGate(t, Config{Allow: []string{"origin.test"}, MapHosts: []string{"origin.test=127.0.0.1"}})
	port := portOf(t, srv.Listener.Addr().String())
	c, err := net.Dial("tcp", tg.httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for i, host := range []string{"origin.test", "denied.test", "origin.test"} {
		fmt.Fprintf(c, "GET http://%s:%s/echo HTTP/1.1\r\nHost: %s:%s\r\n\r\n", host, port, host, port)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(b), "User-Agent") {
			t.Errorf("the gate added a User-Agent:\n%s", b)
		}
		want := 200
		if host == "denied.test" {
			want = 403
		}
		if resp.StatusCode != want || resp.Close {
			t.Fatalf("request %d to %s: %s close=%v; want %d on a kept connection", i, host, resp.Status, resp.Close, want)
		}
	}
	wantDecision(t, tg.Gate, ProtoHTTP, "denied.test", ReasonNoMatchingRule)
	waitDecision(t, tg.Gate, func(d Decision) bool {
		return d.Seq == 3 && d.Host == "origin.test" && d.Reason == ReasonAllowedByRule
	})
	// The upstream connection was reused for the third request.
	if calls := tg.dialer.calls(); len(calls) != 1 {
		t.Errorf("dialled %v; want one connection reused", calls)
	}
}

func TestHTTPSConnectByteExact(t *testing.T) {
	srv := httptest.NewTLSServer(origin())
	defer srv.Close()
	tg := startGate(t, Config{Allow: []string{"example.com"}, MapHosts: []string{"example.com=127.0.0.1"}})
	c := proxyClient(t, tg, "task-tls", srv)
	port := portOf(t, srv.Listener.Addr().String())
	resp, body := get(t, c, "https://example.com:"+port+"/blob")
	if resp.StatusCode != 200 || sha256.Sum256(body) != sha256.Sum256(blob) {
		t.Fatalf("GET over CONNECT: %s, %d bytes; want the blob", resp.Status, len(body))
	}
	c.Transport.(*http.Transport).CloseIdleConnections()
	d := wantDecision(t, tg.Gate, ProtoConnect, "example.com", ReasonAllowedByRule)
	if d.Task != "task-tls" || d.BytesDown < int64(len(blob)) || d.BytesUp == 0 || d.Addr != "127.0.0.1" || d.Duration <= 0 {
		t.Fatalf("decision %+v", d)
	}
}

// rawRequest sends head on a fresh connection and returns the response.
func rawRequest(t *testing.T, addr, head string) (*http.Response, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the answer to %q: %v", head, err)
	}
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestHTTPRefusals(t *testing.T) {
	srv := httptest.NewServer(origin())
	defer srv.Close()
	port := portOf(t, srv.Listener.Addr().String())
	tg := startGate(t, Config{
		Allow: []string{"*.example.test", "svc.test:443", "open.test", "8.8.8.8:80", "127.0.0.2"},
		Deny:  []string{"bad.example.test", "open.test:" + port, "9.9.9.0/24"},
		Resolver: fakeResolver{
			"a.example.test":        {"8.8.8.8"},
			"open.test":             {"8.8.8.8"},
			"svc.test":              {"8.8.8.8"},
			"private.example.test":  {"10.0.0.1"},
			"meta.example.test":     {"169.254.169.254"},
			"loop.example.test":     {"127.0.0.1"},
			"mapped.example.test":   {"::ffff:10.0.0.1"},
			"rebind.example.test":   {"10.0.0.1", "8.8.8.8"},
			"ninenine.example.test": {"9.9.9.9"},
		},
		Dialer: &redirectDialer{to: map[string]string{"8.8.8.8:80": srv.Listener.Addr().String()}},
	})
	tests := []struct {
		name, target, host string
		status             int
		reason             Reason
		addr               string
		body               string
	}{
		{"no rule", "http://other.test/", "other.test", 403, ReasonNoMatchingRule, "", "airlock run --allow other.test"},
		{"apex not in wildcard", "http://example.test/", "example.test", 403, ReasonNoMatchingRule, "", ""},
		{"deny wins", "http://bad.example.test/", "bad.example.test", 403, ReasonDeniedByRule, "", "deny rule bad.example.test"},
		{"denied port", "http://open.test:" + port + "/", "open.test", 403, ReasonDeniedByRule, "", ""},
		{"port not allowed", "http://svc.test:80/", "svc.test", 403, ReasonNoMatchingRule, "", ""},
		{"private resolution", "http://private.example.test/", "private.example.test", 403, ReasonPrivateAddress, "10.0.0.1", "--allow 10.0.0.1"},
		{"loopback resolution", "http://loop.example.test/", "loop.example.test", 403, ReasonPrivateAddress, "127.0.0.1", ""},
		{"mapped private", "http://mapped.example.test/", "mapped.example.test", 403, ReasonPrivateAddress, "10.0.0.1", ""},
		{"metadata resolution", "http://meta.example.test/", "meta.example.test", 403, ReasonMetadataAddress, "169.254.169.254", ""},
		{"denied address", "http://ninenine.example.test/", "ninenine.example.test", 403, ReasonDeniedByRule, "9.9.9.9", ""},
		{"unresolvable", "http://nx.example.test/", "nx.example.test", 502, ReasonResolveFailed, "", ""},
		{"ip literal, name rules only", "http://1.1.1.1/", "1.1.1.1", 403, ReasonNoMatchingRule, "", ""},
		{"ip literal loopback", "http://127.0.0.1:" + port + "/", "127.0.0.1", 403, ReasonPrivateAddress, "127.0.0.1", ""},
		{"ip literal metadata", "http://169.254.169.254/", "169.254.169.254", 403, ReasonMetadataAddress, "169.254.169.254", ""},
		{"ip literal mapped v6", "http://[::ffff:169.254.169.254]/", "169.254.169.254", 403, ReasonMetadataAddress, "169.254.169.254", ""},
		{"ip literal denied cidr", "http://9.9.9.9/", "9.9.9.9", 403, ReasonDeniedByRule, "", ""},
		{"numeric name", "http://127.1/", "", 400, ReasonBadRequest, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := rawRequest(t, tg.httpAddr, "GET "+tt.target+" HTTP/1.1\r\n\r\n")
			if resp.StatusCode != tt.status {
				t.Fatalf("status %s; want %d; body %q", resp.Status, tt.status, body)
			}
			if got, want := resp.Header.Get("X-Airlock-Decision"), "deny; reason="+string(tt.reason); got != want {
				t.Errorf("X-Airlock-Decision %q; want %q", got, want)
			}
			if !strings.Contains(body, tt.body) || (tt.host != "" && !strings.Contains(body, tt.host)) {
				t.Errorf("body %q; want it to name %q and contain %q", body, tt.host, tt.body)
			}
			d := waitDecision(t, tg.Gate, func(d Decision) bool { return d.Reason == tt.reason && d.Host == tt.host })
			if d.Action != ActionDeny || d.Addr != tt.addr {
				t.Errorf("decision %+v; want deny with addr %q", d, tt.addr)
			}
		})
	}

	// Allowed: the public answer of a rebinding name, dialled as checked.
	resp, body := rawRequest(t, tg.httpAddr, "GET http://rebind.example.test/echo HTTP/1.1\r\nConnection: close\r\n\r\n")
	if resp.StatusCode != 200 || !strings.Contains(body, "host=rebind.example.test") {
		t.Fatalf("rebind: %s %q", resp.Status, body)
	}
	d := wantDecision(t, tg.Gate, ProtoHTTP, "rebind.example.test", ReasonAllowedByRule)
	if d.Addr != "8.8.8.8" || d.Rule != "*.example.test" {
		t.Fatalf("rebind decision %+v", d)
	}
	resp, _ = rawRequest(t, tg.httpAddr, "GET http://8.8.8.8/echo HTTP/1.1\r\nConnection: close\r\n\r\n")
	if resp.StatusCode != 200 {
		t.Fatalf("ip literal with an IP rule: %s", resp.Status)
	}
	wantDecision(t, tg.Gate, ProtoHTTP, "8.8.8.8", ReasonAllowedByRule)
	for _, a := range tg.dialer.calls() {
		if a != "8.8.8.8:80" {
			t.Errorf("gate dialled %s; only 8.8.8.8:80 was ever allowed", a)
		}
	}
}

func TestHTTPPrivateAddressAllowedExplicitly(t *testing.T) {
	srv := httptest.NewServer(origin())
	defer srv.Close()
	port := portOf(t, srv.Listener.Addr().String())
	tests := []struct {
		allow  []string
		target string
		reason Reason
	}{
		{[]string{"127.0.0.1"}, "127.0.0.1", ReasonAllowedByRule},
		{[]string{"127.0.0.0/8:" + port}, "127.0.0.1", ReasonAllowedByRule},
		{[]string{"127.0.0.0/8:1"}, "127.0.0.1", ReasonPrivateAddress},
		{[]string{"0.0.0.0/0"}, "127.0.0.1", ReasonPrivateAddress}, // wider than loopback: no exemption
		{[]string{"::/0", "0.0.0.0/1"}, "127.0.0.1", ReasonPrivateAddress},
		{[]string{"local.test", "127.0.0.1"}, "local.test", ReasonAllowedByRule},
		{[]string{"local.test"}, "local.test", ReasonPrivateAddress},
		{[]string{"local.test", "0.0.0.0/0"}, "local.test", ReasonPrivateAddress},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.allow, ",")+" "+tt.target, func(t *testing.T) {
			tg := startGate(t, Config{Allow: tt.allow, Resolver: fakeResolver{"local.test": {"127.0.0.1"}}})
			resp, _ := rawRequest(t, tg.httpAddr, "GET http://"+tt.target+":"+port+"/echo HTTP/1.1\r\nConnection: close\r\n\r\n")
			wantStatus := 200
			if tt.reason != ReasonAllowedByRule {
				wantStatus = 403
			}
			if resp.StatusCode != wantStatus {
				t.Fatalf("status %s; want %d", resp.Status, wantStatus)
			}
			wantDecision(t, tg.Gate, ProtoHTTP, tt.target, tt.reason)
		})
	}
}

func TestHTTPBadRequests(t *testing.T) {
	tg := startGate(t, Config{Allow: []string{"origin.test"}, MapHosts: []string{"origin.test=127.0.0.1"}, Limits: Limits{MaxHeaderBytes: 4096, HeaderTimeout: 300 * time.Millisecond}})
	tests := []struct {
		name, head string
		status     int
		reason     Reason
		host       string
	}{
		{"host mismatch", "GET http://origin.test:8080/ HTTP/1.1\r\nHost: evil.test:8080\r\n\r\n", 400, ReasonHostMismatch, "origin.test"},
		{"host port mismatch", "GET http://origin.test/ HTTP/1.1\r\nHost: origin.test:8080\r\n\r\n", 400, ReasonHostMismatch, "origin.test"},
		{"host default port agrees", "GET http://origin.test:1/ HTTP/1.1\r\nHost: origin.test\r\n\r\n", 400, ReasonHostMismatch, "origin.test"},
		{"two hosts", "GET http://origin.test/ HTTP/1.1\r\nHost: origin.test\r\nHost: evil.test\r\n\r\n", 400, ReasonHostMismatch, ""},
		{"connect host mismatch", "CONNECT origin.test:443 HTTP/1.1\r\nHost: evil.test:443\r\n\r\n", 400, ReasonHostMismatch, "origin.test"},
		{"origin form", "GET /index.html HTTP/1.1\r\nHost: origin.test\r\n\r\n", 400, ReasonBadRequest, ""},
		{"https absolute", "GET https://origin.test/ HTTP/1.1\r\n\r\n", 400, ReasonBadRequest, ""},
		{"ftp", "GET ftp://origin.test/ HTTP/1.1\r\n\r\n", 400, ReasonBadRequest, ""},
		{"connect without port", "CONNECT origin.test HTTP/1.1\r\n\r\n", 400, ReasonBadRequest, ""},
		{"connect port 0", "CONNECT origin.test:0 HTTP/1.1\r\n\r\n", 400, ReasonBadRequest, ""},
		{"userinfo", "GET http://u:p@origin.test/ HTTP/1.1\r\n\r\n", 400, ReasonBadRequest, ""},
		{"garbage", "HELLO\r\n\r\n", 400, ReasonBadRequest, ""},
		{"bad name", "GET http://exa%20mple.test/ HTTP/1.1\r\n\r\n", 400, ReasonBadRequest, ""},
		{"oversized head", "GET http://origin.test/ HTTP/1.1\r\nX-Big: " + strings.Repeat("a", 5000) + "\r\n\r\n", 431, ReasonHeaderTooLarge, ""},
		{"slow head", "GET http://origin.test/ HTTP/1.1\r\nX-Slow: 1\r\n", 408, ReasonTimeout, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			seq := len(tg.Recent())
			resp, body := rawRequest(t, tg.httpAddr, tt.head)
			if resp.StatusCode != tt.status || resp.Header.Get("X-Airlock-Decision") != "deny; reason="+string(tt.reason) {
				t.Fatalf("%s %q %q; want %d %s", resp.Status, resp.Header.Get("X-Airlock-Decision"), body, tt.status, tt.reason)
			}
			d := waitDecision(t, tg.Gate, func(d Decision) bool { return d.Seq > uint64(seq) })
			if d.Reason != tt.reason || d.Host != tt.host {
				t.Fatalf("decision %+v; want %s for %q", d, tt.reason, tt.host)
			}
		})
	}
}

func TestHTTPCredentials(t *testing.T) {
	srv := httptest.NewServer(origin())
	defer srv.Close()
	port := portOf(t, srv.Listener.Addr().String())
	target := "http://origin.test:" + port + "/echo"
	basic := func(u, p string) string {
		return "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(u+":"+p)) + "\r\n"
	}
	for _, require := range []bool{false, true} {
		t.Run(fmt.Sprint("require=", require), func(t *testing.T) {
			tg := startGate(t, Config{Allow: []string{"origin.test"}, MapHosts: []string{"origin.test=127.0.0.1"}, RequireCredential: require})
			user, pass := tg.Credentials("task-a")
			if u2, p2 := tg.Credentials("task-a"); u2 != user || p2 != pass {
				t.Fatal("Credentials not stable for a task")
			}
			if u2, _ := tg.Credentials("task-b"); u2 == user {
				t.Fatal("two tasks share a user")
			}
			tests := []struct {
				name, auth string
				status     int
				reason     Reason
				task       string
			}{
				{"good", basic(user, pass), 200, ReasonAllowedByRule, "task-a"},
				{"wrong password", basic(user, pass+"x"), 407, ReasonAuthFailed, ""},
				{"unknown user", basic("nobody", pass), 407, ReasonAuthFailed, ""},
				{"not basic", "Proxy-Authorization: Bearer " + pass + "\r\n", 407, ReasonAuthFailed, ""},
				{"missing", "", map[bool]int{false: 200, true: 407}[require],
					map[bool]Reason{false: ReasonAllowedByRule, true: ReasonAuthFailed}[require], ""},
			}
			for _, tt := range tests {
				seq := len(tg.Recent())
				resp, _ := rawRequest(t, tg.httpAddr, "GET "+target+" HTTP/1.1\r\n"+tt.auth+"Connection: close\r\n\r\n")
				if resp.StatusCode != tt.status {
					t.Fatalf("%s: %s; want %d", tt.name, resp.Status, tt.status)
				}
				if tt.status == 407 && !strings.HasPrefix(resp.Header.Get("Proxy-Authenticate"), "Basic") {
					t.Errorf("%s: no Proxy-Authenticate", tt.name)
				}
				d := waitDecision(t, tg.Gate, func(d Decision) bool { return d.Seq > uint64(seq) })
				if d.Reason != tt.reason || d.Task != tt.task || d.Host != "origin.test" {
					t.Fatalf("%s: decision %+v", tt.name, d)
				}
			}
			tg.Revoke("task-a")
			resp, _ := rawRequest(t, tg.httpAddr, "GET "+target+" HTTP/1.1\r\n"+basic(user, pass)+"\r\n")
			if resp.StatusCode != 407 {
				t.Fatalf("revoked credential: %s", resp.Status)
			}
		})
	}
}

// TestHTTPSlowlorisBytewise checks the head deadline covers the whole head,
// not each read: a client trickling bytes is cut off.
func TestHTTPSlowlorisBytewise(t *testing.T) {
	tg := startGate(t, Config{Limits: Limits{HeaderTimeout: 300 * time.Millisecond}})
	c, err := net.Dial("tcp", tg.httpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	head := "GET http://x.test/ HTTP/1.1\r\n" + strings.Repeat("X-A: b\r\n", 200)
	for i := 0; i < len(head); i++ {
		if _, err := c.Write([]byte{head[i]}); err != nil {
			break
		}
		time.Sleep(5 * time.Millisecond)
		if time.Since(start) > 5*time.Second {
			t.Fatal("the gate kept reading a trickling head for 5s")
		}
	}
	wantDecision(t, tg.Gate, ProtoHTTP, "", ReasonTimeout)
}

func TestRefusalGolden(t *testing.T) {
	d := Decision{Host: "blocked.example", Port: 443, Reason: ReasonNoMatchingRule, Detail: "no allow rule matches blocked.example:443"}
	checkGolden(t, "refusal-no-matching-rule.txt", refusalText(d, false))
	d = Decision{Host: "internal.example", Port: 80, Addr: "10.1.2.3", Reason: ReasonPrivateAddress, Detail: "internal.example resolved to private address 10.1.2.3"}
	checkGolden(t, "refusal-private-address.txt", refusalText(d, false))
}

// Through the service a refusal names `airlock egress`, which changes that
// sandbox's rules: `airlock run --allow` would boot another VM.
func TestRefusalThroughService(t *testing.T) {
	for _, d := range []Decision{
		{Host: "blocked.example", Port: 443, Reason: ReasonNoMatchingRule, Detail: "no allow rule matches blocked.example:443"},
		{Host: "blocked.example", Port: 443, Reason: ReasonNoMatchingRule, Detail: "denied (no window to ask)"},
		{Host: "blocked.example", Port: 443, Reason: ReasonAskDenied, Detail: "denied when asked"},
		{Host: "internal.example", Port: 80, Addr: "10.1.2.3", Reason: ReasonPrivateAddress},
		{Host: "pinned.example", Port: 8080, Addr: "10.1.2.3", Reason: ReasonPrivateAddress, Rule: "map-host pinned.example=10.1.2.3"},
		{Host: "x.example", Port: 443, Reason: ReasonDeniedByRule, Rule: "x.example"},
		{Host: "x.example", Port: 443, Reason: ReasonUpstreamCert},
	} {
		text := refusalText(d, true)
		if strings.Contains(text, "airlock run") || strings.Contains(text, "--map-host") {
			t.Errorf("%s: through the service the fix is a run flag:\n%s", d.Reason, text)
		}
		if d.Reason != ReasonUpstreamCert && !strings.Contains(text, "airlock egress ") {
			t.Errorf("%s: no airlock egress command:\n%s", d.Reason, text)
		}
	}
	checkGolden(t, "refusal-service-no-window.txt", refusalText(Decision{Host: "blocked.example", Port: 443, Reason: ReasonNoMatchingRule, Detail: "denied (no window to ask)"}, true))
}
