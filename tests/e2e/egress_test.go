//go:build e2e

package e2e

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/app/egress"
	"github.com/airlock-sandbox/airlock/guest/client"
)

// blob is what the test servers serve: 8 MiB of a fixed pattern.
var blob = func() []byte {
	b := make([]byte, 8<<20)
	for i := range b {
		b[i] = byte(i*7 + i>>9)
	}
	return b
}()

func blobSum() string { s := sha256.Sum256(blob); return hex.EncodeToString(s[:]) }

func serveBlob(tls bool) *httptest.Server {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(blob) })
	if tls {
		return httptest.NewTLSServer(h)
	}
	return httptest.NewServer(h)
}

func port(s *httptest.Server) string {
	_, p, _ := net.SplitHostPort(s.Listener.Addr().String())
	return p
}

// netTask runs cmd on the shared VM with a fresh task id and its proxy
// environment, and returns the task id and result.
func netTask(t *testing.T, cmd string) (string, result) {
	t.Helper()
	id := newTaskID()
	user, pass := sharedGate.Credentials(id)
	r := sh(t, client.Spec{ID: id, Argv: []string{"sh", "-c", cmd}, Env: egress.ProxyEnv(user, pass)}, nil)
	return id, r
}

var taskN struct {
	sync.Mutex
	n int
}

func newTaskID() string {
	taskN.Lock()
	defer taskN.Unlock()
	taskN.n++
	return fmt.Sprintf("e2e-%d", taskN.n)
}

// decision finds the gate's log entry for host:port, waiting briefly: the
// gate records a decision when the connection ends.
func decision(t *testing.T, task, host, port string) egress.Decision {
	t.Helper()
	for i := 0; i < 100; i++ {
		for _, d := range sharedGate.Recent() {
			if d.Task == task && d.Host == host && fmt.Sprint(d.Port) == port {
				return d
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no decision logged for task %s to %s:%s", task, host, port)
	return egress.Decision{}
}

func TestEgressAllowedHTTPAndHTTPS(t *testing.T) {
	p := probe(t)
	plain, secure := serveBlob(false), serveBlob(true)
	defer plain.Close()
	defer secure.Close()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: secure.Certificate().Raw})
	if err := os.WriteFile(filepath.Join(sharedWS, "test-ca.pem"), ca, 0o644); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("status=200 bytes=%d sha256=%s", len(blob), blobSum())
	cases := []struct{ name, cmd, host, port, proto string }{
		{"http", p + " get http://files.test:" + port(plain) + "/blob", "files.test", port(plain), "http"},
		{"https-connect", p + " get https://example.com:" + port(secure) + "/blob /workspace/test-ca.pem", "example.com", port(secure), "connect"},
		{"socks", p + " socks http://files.test:" + port(plain) + "/blob", "files.test", port(plain), "socks"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			task, r := netTask(t, c.cmd)
			if !strings.HasPrefix(r.Stdout, want) {
				t.Fatalf("%s: %q %q", c.cmd, r.Stdout, r.Stderr)
			}
			d := decision(t, task, c.host, c.port)
			if d.Action != egress.ActionAllow || d.Reason != egress.ReasonAllowedByRule || string(d.Protocol) != c.proto || d.BytesDown < int64(len(blob)) {
				t.Fatalf("logged %+v", d)
			}
		})
	}
	// busybox wget too (it speaks plain HTTP to the proxy).
	_, r := netTask(t, "wget -q -O- http://files.test:"+port(plain)+"/blob | sha256sum")
	if !strings.HasPrefix(r.Stdout, blobSum()) {
		t.Fatalf("busybox wget: %q %q", r.Stdout, r.Stderr)
	}
}

// TestEgressRefused: every way out that the policy does not allow fails in
// the guest, and the gate logs each with its reason.
func TestEgressRefused(t *testing.T) {
	p := probe(t)
	srv := serveBlob(false)
	defer srv.Close()
	sp := port(srv)
	cases := []struct {
		name, cmd, host, port string
		reason                egress.Reason
	}{
		{"unknown name", p + " get http://unknown.test/", "unknown.test", "80", egress.ReasonNoMatchingRule},
		{"denied name", p + " get http://secret.corp.test/", "secret.corp.test", "80", egress.ReasonDeniedByRule},
		{"denied port", p + " get http://files.test:9/", "files.test", "9", egress.ReasonDeniedByRule},
		{"port not allowed", p + " get http://ports.test:8080/", "ports.test", "8080", egress.ReasonNoMatchingRule},
		{"ip literal", p + " get http://93.184.215.14/", "93.184.215.14", "80", egress.ReasonNoMatchingRule},
		// NO_PROXY keeps tools from sending the guest's own loopback to the
		// proxy, so ask the proxy for the host's loopback by hand.
		{"loopback literal", p + ` raw "GET http://127.0.0.1:` + sp + `/ HTTP/1.1\nHost: 127.0.0.1:` + sp + `\n\n"`, "127.0.0.1", sp, egress.ReasonPrivateAddress},
		{"name resolving to loopback", p + ` raw "GET http://localhost:` + sp + `/ HTTP/1.1\nHost: localhost:` + sp + `\n\n"`, "localhost", sp, egress.ReasonPrivateAddress},
		{"metadata", p + " get http://169.254.169.254/latest/meta-data/", "169.254.169.254", "80", egress.ReasonMetadataAddress},
		{"socks by address", p + " socks http://10.0.0.1:" + sp + "/", "10.0.0.1", sp, egress.ReasonPrivateAddress},
		{"host mismatch", p + ` raw "GET http://files.test:` + sp + `/ HTTP/1.1\nHost: evil.test\n\n"`, "files.test", sp, egress.ReasonHostMismatch},
		{"busybox wget", "wget -q -O- http://secret.corp.test:8081/", "secret.corp.test", "8081", egress.ReasonDeniedByRule},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			task, r := netTask(t, c.cmd)
			if r.Exit.Code == 0 {
				t.Fatalf("%s succeeded: %q", c.cmd, r.Stdout)
			}
			d := decision(t, task, c.host, c.port)
			if d.Action != egress.ActionDeny || d.Reason != c.reason {
				t.Fatalf("%s: logged %+v, want deny with %s for task %s (stdout %q)", c.name, d, c.reason, task, r.Stdout)
			}
			if strings.Contains(c.cmd, " get ") && !strings.Contains(r.Stdout, "reason="+string(c.reason)) {
				t.Errorf("the refusal does not tell the tool why: %q", r.Stdout)
			}
		})
	}
}

// TestEgressNoDirectWay: without the gate there is no way out at all.
func TestEgressNoDirectWay(t *testing.T) {
	p := probe(t)
	for _, addr := range []string{"1.1.1.1:443", "10.0.2.2:80", "[2606:4700::1111]:443", "169.254.169.254:80"} {
		r := sh(t, shell(p+" dial "+addr), nil)
		if r.Exit.Code == 0 || !strings.Contains(r.Stdout, "unreachable") {
			t.Errorf("direct connect to %s: %q", addr, r.Stdout)
		}
	}
	r := sh(t, shell(p+" resolve example.com"), nil)
	if r.Exit.Code == 0 {
		t.Errorf("the guest resolved a name by itself: %q", r.Stdout)
	}
	r = sh(t, shell("ip -o link | cut -d: -f2; test ! -e /etc/resolv.conf && echo no-resolver"), nil)
	if r.Stdout != " lo\nno-resolver\n" {
		t.Errorf("guest network: %q", r.Stdout)
	}
}

// TestRunEgressFlags: the CLI's --allow, --map-host, --deny and
// --egress-log, end to end, and a bad pattern refused before boot.
func TestRunEgressFlags(t *testing.T) {
	srv := serveBlob(false)
	defer srv.Close()
	logFile := filepath.Join(t.TempDir(), "egress.jsonl")
	code, out, errOut := airlock(t, "", "run", "--allow", "files.test:"+port(srv), "--map-host", "files.test=127.0.0.1", "--deny", "*.ads.test",
		"--egress-log", logFile, "--", "sh", "-c",
		"wget -q -O- http://files.test:"+port(srv)+"/blob | sha256sum | cut -c1-64; wget -q -O- http://x.ads.test/; wget -q -O- http://elsewhere.test/; true")
	if code != 0 || out != blobSum()+"\n" {
		t.Fatalf("code %d stdout %q stderr %q", code, out, errOut)
	}
	for _, want := range []string{"refused x.ads.test:80 (denied-by-rule)", "refused elsewhere.test:80 (no-matching-rule); allow it with --allow elsewhere.test"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr does not say %q: %q", want, errOut)
		}
	}
	b, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], `"decision":"allow"`) || !strings.Contains(lines[1], `"reason":"denied-by-rule"`) {
		t.Fatalf("egress log:\n%s", b)
	}
	code, _, errOut = airlock(t, "", "run", "--allow", "exa mple.com", "--", "true")
	if code != 125 || !strings.Contains(errOut, `"exa mple.com"`) {
		t.Fatalf("bad pattern: code %d stderr %q", code, errOut)
	}
}

// TestEgressUploadAfterResponse: a client that goes on sending after the
// server has answered and half-closed gets what it sends through, and its
// own half-close reaches the server, through both proxies. The guest's
// forwarder and the gate carry the half-close as a record of their stream
// (guest/api/egresswire), the same on every backend: on a Mac the
// transport itself cannot half-close.
func TestEgressUploadAfterResponse(t *testing.T) {
	p := probe(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	uploads := make(chan string, 2)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(60 * time.Second))
				br := bufio.NewReader(c)
				if _, err := br.ReadString('\n'); err != nil {
					uploads <- "origin: " + err.Error()
					return
				}
				io.WriteString(c, "response")
				c.(*net.TCPConn).CloseWrite()
				rest, err := io.ReadAll(br)
				if err != nil {
					uploads <- "origin: " + err.Error()
					return
				}
				uploads <- string(rest)
			}()
		}
	}()
	_, sp, _ := net.SplitHostPort(l.Addr().String())
	for _, via := range []string{"connect", "socks"} {
		t.Run(via, func(t *testing.T) {
			text := "uploaded-after-the-response-by-" + via
			_, r := netTask(t, p+" lateupload "+via+" files.test:"+sp+" "+text)
			if r.Exit.Code != 0 || !strings.Contains(r.Stdout, `answer="response"`) {
				t.Fatalf("probe: %q %q", r.Stdout, r.Stderr)
			}
			select {
			case got := <-uploads:
				if got != text {
					t.Fatalf("the server got %q after its half-close, want %q", got, text)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the client's half-close never reached the server")
			}
		})
	}
}
