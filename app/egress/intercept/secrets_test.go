package intercept

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/airlock-sandbox/airlock/app/egress/policy"
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

func mustSet(t *testing.T, s []Secret) *Secrets {
	t.Helper()
	set, err := NewSecrets(s)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

func mustTarget(t *testing.T, host string) policy.Target {
	tg, err := policy.NewTarget(host, 443)
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
		_, err := NewSecrets([]Secret{s})
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
	if _, err := NewSecrets([]Secret{good, dup}); err == nil {
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
		_, _, err := set.Apply(c.r, mustTarget(t, c.host), true)
		if err == nil {
			t.Errorf("%s: not refused", c.name)
		} else if strings.Contains(err.Error(), testValue) {
			t.Errorf("%s: refusal shows the value", c.name)
		}
	}
	// Plain HTTP: refused even to the right host.
	if _, _, err := set.Apply(req("/x", "Authorization", "Bearer "+testPH), mustTarget(t, "api.test"), false); err == nil {
		t.Error("plain HTTP placeholder to its own host not refused")
	}

	r := req("/v1?key="+testPH+"&b=1", "Authorization", "Bearer "+strings.ToLower(testPH), "Proxy-Basic", basic)
	used, sent, err := set.Apply(r, mustTarget(t, "api.test"), true)
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
	used, _, err = set.Apply(r, mustTarget(t, "other.test"), true)
	if err != nil || len(used) != 1 || r.Header.Get("X-Api-Key") != "key=other-value" {
		t.Fatalf("template: %v %v %q", used, err, r.Header)
	}
	// A secret with a template goes where the template says and nowhere
	// else: its placeholder elsewhere goes out as it is.
	obasic := "Basic " + base64.StdEncoding.EncodeToString([]byte("u:"+otherPH))
	r = req("/v1?key="+otherPH, "X-Api-Key", "key="+otherPH, "X-Echo", otherPH, "Authorization", obasic)
	used, _, err = set.Apply(r, mustTarget(t, "other.test"), true)
	if err != nil || len(used) != 1 || r.Header.Get("X-Api-Key") != "key=other-value" || r.Header.Get("X-Echo") != otherPH ||
		r.Header.Get("Authorization") != obasic || r.URL.RawQuery != "key="+otherPH {
		t.Fatalf("template only: %v %v %q %q", used, err, r.Header, r.URL.RawQuery)
	}
	r = req("/v1", "Authorization", "Bearer nothing")
	if used, _, err := set.Apply(r, mustTarget(t, "plain.test"), true); err != nil || used != nil || r.Header.Get("Authorization") != "Bearer nothing" {
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

// UpstreamRoots: nil (crypto/tls then loads the system's roots on first
// use) without files; the system's plus each file's certificates with
// them; a file without a certificate, or missing, is an error naming it.
func TestUpstreamRoots(t *testing.T) {
	if pool, err := UpstreamRoots(nil); pool != nil || err != nil {
		t.Fatalf("no files: %v, %v; want nil, nil", pool, err)
	}
	corp, err := LoadCA(t.TempDir()) // stands for a corporate CA
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	good := filepath.Join(dir, "corp.pem")
	os.WriteFile(good, corp.CertPEM(), 0o644)
	pool, err := UpstreamRoots([]string{good})
	if err != nil || pool == nil {
		t.Fatalf("with a CA file: %v, %v", pool, err)
	}
	leaf, err := corp.leaf("corp.test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leaf.Leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "corp.test"}); err != nil {
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
