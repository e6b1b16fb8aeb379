//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/big"
	"math/bits"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/app/egress"

	"github.com/airlock-sandbox/airlock/app/egress/intercept"
	"github.com/airlock-sandbox/airlock/app/sandbox"
	"github.com/airlock-sandbox/airlock/app/workspace"
	"github.com/airlock-sandbox/airlock/guest/client"
)

// credWorld is a VM of its own whose gate has a CA and secrets, and local
// TLS servers standing for the real APIs: secret.test (the secret's host),
// other.test (allowed, inspected because another secret is for it),
// bad.test (a certificate nobody trusts), plain.test (plain HTTP) and
// echo.test (a host of two secrets that echoes everything it receives).
type credWorld struct {
	sb       *sandbox.Sandbox
	gate     *egress.Gate
	value    string // the real secret: never in the guest
	ph       string // its placeholder
	echoPH   string // the placeholder of ECHO, a secret with a header template
	canary   string // a string deliberately put in the guest, to prove the scan finds things
	ports    map[string]string
	seen     *seenLog
	hostDirs []string // host folders whose files must not hold the value
}

// seenLog records what the servers received, per host.
type seenLog struct {
	mu   sync.Mutex
	reqs map[string][]string // host -> "Authorization|query|body"
}

func (s *seenLog) add(host, v string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reqs[host] = append(s.reqs[host], v)
}

func (s *seenLog) get(host string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.reqs[host]...)
}

func newCredWorld(t *testing.T) *credWorld {
	t.Helper()
	w := &credWorld{value: "live-" + randHex(20), canary: "canary-" + randHex(20), ports: map[string]string{},
		seen: &seenLog{reqs: map[string][]string{}}}
	w.ph = "airlock_ph_token_" + randHex(12)
	w.echoPH = "airlock_ph_echo_" + randHex(12)

	upCA, upKey := testCA(t)
	roots := x509.NewCertPool()
	roots.AddCert(upCA)
	badCA, badKey := testCA(t)
	serve := func(host string, ca *x509.Certificate, key *ecdsa.PrivateKey) {
		h := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
			b := make([]byte, 1<<16)
			n, _ := r.Body.Read(b)
			w.seen.add(host, r.Header.Get("Authorization")+"|"+r.URL.RawQuery+"|"+string(b[:n]))
			rw.Write([]byte("ok")) // never echo: the guest must not see what arrived
		})
		s := httptest.NewUnstartedServer(h)
		if ca != nil {
			s.TLS = &tls.Config{Certificates: []tls.Certificate{leafFor(t, host, ca, key)}}
			s.StartTLS()
		} else {
			s.Start()
		}
		t.Cleanup(s.Close)
		_, w.ports[host], _ = net.SplitHostPort(s.Listener.Addr().String())
	}
	serve("secret.test", upCA, upKey)
	serve("other.test", upCA, upKey)
	serve("bad.test", badCA, badKey)
	serve("plain.test", nil, nil)
	// echo.test is an error page that shows its input: what arrived, in a
	// Location header, another header and the body (written in small
	// pieces, so values straddle chunks).
	echo := httptest.NewUnstartedServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w.seen.add("echo.test", r.Header.Get("Authorization")+"|"+r.Header.Get("X-Api-Key")+"|"+r.URL.RawQuery)
		var all strings.Builder
		r.Header.Write(&all)
		rw.Header().Set("Location", "https://elsewhere.test/login?auth="+url.QueryEscape(r.Header.Get("Authorization"))+"&key="+url.QueryEscape(r.Header.Get("X-Api-Key")))
		rw.Header().Set("X-Echo", r.Header.Get("Authorization")+" "+r.Header.Get("X-Api-Key"))
		rw.WriteHeader(http.StatusFound)
		for b := all.String(); b != ""; b = b[min(5, len(b)):] {
			io.WriteString(rw, b[:min(5, len(b))])
			rw.(http.Flusher).Flush()
		}
	}))
	echo.TLS = &tls.Config{Certificates: []tls.Certificate{leafFor(t, "echo.test", upCA, upKey)}}
	echo.StartTLS()
	t.Cleanup(echo.Close)
	_, w.ports["echo.test"], _ = net.SplitHostPort(echo.Listener.Addr().String())

	state := t.TempDir()
	ca, err := intercept.LoadCA(filepath.Join(state, "ca"))
	if err != nil {
		t.Fatal(err)
	}
	logFile := filepath.Join(state, "egress.jsonl")
	w.gate, err = egress.New(egress.Config{
		Allow: []string{"secret.test", "other.test", "bad.test", "plain.test", "echo.test"},
		MapHosts: []string{"secret.test=127.0.0.1", "other.test=127.0.0.1", "bad.test=127.0.0.1", "plain.test=127.0.0.1",
			"echo.test=127.0.0.1"},
		LogFile: logFile, CA: ca, UpstreamRoots: roots,
		Secrets: []intercept.Secret{
			{Name: "TOKEN", Hosts: []string{"secret.test", "echo.test"}, Placeholder: w.ph, Value: []byte(w.value)},
			// Its value holds TOKEN's, so the guest scan for TOKEN's covers it.
			{Name: "ECHO", Hosts: []string{"echo.test"}, Header: "X-Api-Key: key={}", Placeholder: w.echoPH, Value: []byte(w.value + "-echo")},
			{Name: "OTHER", Hosts: []string{"other.test"}, Placeholder: "airlock_ph_other_" + randHex(12), Value: []byte("other-" + randHex(8))},
			{Name: "BAD", Hosts: []string{"bad.test"}, Header: "Authorization: Bearer {}", Placeholder: "airlock_ph_bad_" + randHex(12), Value: []byte(w.value)},
		},
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.gate.Close() })

	ws := newWorkspace(t)
	build := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(ws, "credprobe"), "./testdata/credprobe")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build credprobe: %v\n%s", err, out)
	}
	img, err := sandbox.LoadImage(sandbox.ImageDirUnder(imageRoot, sandbox.DefaultImage, runtime.GOARCH))
	if err != nil {
		t.Fatal(err)
	}
	runDir := filepath.Join(state, "run")
	uid, gid := workspace.Owner(ws)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	w.sb, err = sandbox.Start(ctx, sandbox.Options{
		Workspace: ws, Image: img, UID: uid, GID: gid, MemoryMiB: 1024, Egress: w.gate,
		GuestCA: ca.CertPEM(), RunDir: runDir, ConsoleLog: filepath.Join(state, "console.log"),
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
	if err != nil {
		t.Fatal("boot:", err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		w.sb.Close(cctx)
	})
	w.hostDirs = []string{state, ws}
	return w
}

// task runs a shell command as a task given --secret TOKEN would run:
// the proxy and CA variables and TOKEN=<placeholder>.
func (w *credWorld) task(t *testing.T, cmd string, root bool) (string, int) {
	t.Helper()
	user, pass := w.gate.Credentials("cred")
	env := append(egress.ProxyEnv(user, pass), egress.TrustEnv()...)
	env = append(env, "TOKEN="+w.ph, "CANARY="+w.canary)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out bytes.Buffer
	exit, err := w.sb.Agent().Exec(ctx, client.Spec{ID: "cred-" + randHex(4), Argv: []string{"sh", "-c", cmd}, Env: env, Root: root},
		client.Stdio{Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatalf("exec %q: %v", cmd, err)
	}
	return out.String(), exit.ShellCode()
}

func (w *credWorld) url(host, path string) string {
	scheme := "https"
	if host == "plain.test" {
		scheme = "http"
	}
	return scheme + "://" + host + ":" + w.ports[host] + path
}

func (w *credWorld) decision(t *testing.T, host string, reason egress.Reason) egress.Decision {
	t.Helper()
	for range 200 {
		for _, d := range w.gate.Recent() {
			if d.Host == host && d.Reason == reason {
				return d
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no %s decision for %s; log:\n%v", reason, host, w.gate.Recent())
	return egress.Decision{}
}

func TestCredentialsStayOnTheHost(t *testing.T) {
	w := newCredWorld(t)
	p := "/workspace/credprobe"

	t.Run("right host gets the real secret", func(t *testing.T) {
		// SSL_CERT_FILE unset: the CA must be in the system bundle itself.
		out, code := w.task(t, `env -u SSL_CERT_FILE `+p+` get "`+w.url("secret.test", "/v1?key=$TOKEN")+`" Authorization "Bearer $TOKEN"`, false)
		if code != 0 || !strings.Contains(out, `status=200`) || strings.Contains(out, w.value) {
			t.Fatalf("exit %d: %s", code, out)
		}
		out, code = w.task(t, p+` socks "`+w.url("secret.test", "/socks")+`" Authorization "Bearer $TOKEN"`, false)
		if code != 0 || !strings.Contains(out, `status=200`) {
			t.Fatalf("socks: exit %d: %s", code, out)
		}
		got := w.seen.get("secret.test")
		if len(got) != 2 || got[0] != "Bearer "+w.value+"|key="+w.value+"|" || !strings.HasPrefix(got[1], "Bearer "+w.value+"|") {
			t.Fatalf("secret.test received %q", got)
		}
		d := w.decision(t, "secret.test", egress.ReasonAllowedByRule)
		if len(d.Secrets) != 1 || d.Secrets[0] != "TOKEN" {
			t.Fatalf("decision %+v", d)
		}
	})

	t.Run("placeholder to another allowed host is refused", func(t *testing.T) {
		out, code := w.task(t, p+` get "`+w.url("other.test", "/")+`" Authorization "Bearer $TOKEN"`, false)
		if code == 0 || !strings.Contains(out, "status=403") || !strings.Contains(out, "placeholder-refused") {
			t.Fatalf("exit %d: %s", code, out)
		}
		out, code = w.task(t, p+` post "`+w.url("other.test", "/upload")+`" "data $TOKEN"`, false)
		if code == 0 {
			t.Fatalf("body: exit %d: %s", code, out)
		}
		out, code = w.task(t, p+` get "`+w.url("plain.test", "/?k=$TOKEN")+`"`, false)
		if code == 0 || !strings.Contains(out, "status=403") {
			t.Fatalf("plain http: exit %d: %s", code, out)
		}
		for _, h := range []string{"other.test", "plain.test"} {
			for _, r := range w.seen.get(h) {
				if strings.Contains(r, w.ph) || strings.Contains(r, w.value) {
					t.Fatalf("%s received %q", h, r)
				}
			}
		}
		d := w.decision(t, "other.test", egress.ReasonPlaceholder)
		if !strings.Contains(d.Detail, "TOKEN") || strings.Contains(d.Detail, w.value) {
			t.Fatalf("decision %+v", d)
		}
		w.decision(t, "plain.test", egress.ReasonPlaceholder)
	})

	t.Run("a secret's host that echoes its input hands back only placeholders", func(t *testing.T) {
		// The output is kept in a file too: the guest scan below must not
		// find the value there either.
		for _, mode := range []string{"echo", "socksecho"} {
			out, _ := w.task(t, p+" "+mode+` "`+w.url("echo.test", "/v1?q=$TOKEN")+`" Authorization "Bearer $TOKEN" | tee -a /tmp/echo.txt`, false)
			if strings.Contains(out, w.value) || strings.Contains(out, url.QueryEscape(w.value)) {
				t.Fatalf("%s: the guest got the value:\n%s", mode, out)
			}
			if !strings.Contains(out, "status=302") || !strings.Contains(out, "Location: https://elsewhere.test/login?auth=Bearer+"+w.ph) ||
				!strings.Contains(out, "key=key%3D"+w.echoPH) || !strings.Contains(out, "Authorization: Bearer "+w.ph) {
				t.Fatalf("%s: the echo did not come through as placeholders:\n%s", mode, out)
			}
		}
		got := w.seen.get("echo.test")
		if len(got) != 2 || got[0] != "Bearer "+w.value+"|key="+w.value+"-echo|q="+w.value || got[1] != got[0] {
			t.Fatalf("echo.test received %q", got)
		}
		d := w.decision(t, "echo.test", egress.ReasonAllowedByRule)
		if !strings.Contains(d.Detail, "value of secret") || strings.Contains(fmt.Sprint(d), w.value) {
			t.Fatalf("decision %+v", d)
		}
	})

	t.Run("server with a bad certificate is refused", func(t *testing.T) {
		out, code := w.task(t, p+` get "`+w.url("bad.test", "/")+`" Authorization "Bearer $TOKEN"`, false)
		if code == 0 || strings.Contains(out, "status=200") {
			t.Fatalf("exit %d: %s", code, out)
		}
		if got := w.seen.get("bad.test"); len(got) != 0 {
			t.Fatalf("bad.test received %q", got)
		}
		d := w.decision(t, "bad.test", egress.ReasonUpstreamCert)
		if !strings.Contains(d.Detail, "certificate") {
			t.Fatalf("decision %+v", d)
		}
	})

	t.Run("the secret is nowhere in the guest", func(t *testing.T) {
		// The canary is in a task's environment, a file, and (having come
		// in with the task's spec) the agent's memory: the scan must find
		// it there, or it proves nothing about the secret.
		// (The scan runs under a shell that has the task's environment.)
		w.task(t, `echo "$CANARY" > /tmp/canary.txt`, false)
		out, code := w.task(t, p+" scan "+scanArgs(w.canary)+"; exit $?", true)
		if code != 0 || !strings.Contains(out, "found in file /tmp/canary.txt") || !strings.Contains(out, "found in environ") ||
			!agentMemory.MatchString(out) {
			t.Fatalf("the scan does not find the canary (exit %d):\n%s", code, out)
		}
		out, code = w.task(t, p+" scan "+scanArgs(w.value)+"; exit $?", true)
		if code != 0 || !strings.Contains(out, "found=0") || strings.Contains(out, "found in") {
			t.Fatalf("the secret is in the guest (exit %d):\n%s", code, out)
		}
		t.Logf("guest scan: %s", strings.TrimSpace(out))
	})

	t.Run("the secret is in no host log or state file", func(t *testing.T) {
		dirs := append([]string(nil), w.hostDirs...)
		if d, err := os.UserCacheDir(); err == nil {
			dirs = append(dirs, filepath.Join(d, "airlock"))
		}
		n := 0
		for _, dir := range dirs {
			filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
				if err != nil || !d.Type().IsRegular() {
					return nil
				}
				n++
				if b, _ := os.ReadFile(path); bytes.Contains(b, []byte(w.value)) {
					t.Errorf("%s holds the secret", path)
				}
				return nil
			})
		}
		if n < 3 {
			t.Fatalf("only %d files looked at", n)
		}
	})
}

// agentMemory matches a find in the memory of the guest agent, which runs
// in init (/init, PID 1).
var agentMemory = regexp.MustCompile(`found in memory of pid 1 \(init\)`)

// scanArgs are credprobe scan's arguments for s: its length, Rabin-Karp
// hash and SHA-256, so the guest never sees s itself.
func scanArgs(s string) string {
	const mod = 1<<61 - 1
	mulmod := func(a, b uint64) uint64 {
		hi, lo := bits.Mul64(a, b)
		r := (hi<<3 | lo>>61) + lo&mod
		for r >= mod {
			r -= mod
		}
		return r
	}
	var h uint64
	for i := 0; i < len(s); i++ {
		h = (mulmod(h, 257) + uint64(s[i])) % mod
	}
	sum := sha256.Sum256([]byte(s))
	return fmt.Sprintf("%d %d %s", len(s), h, hex.EncodeToString(sum[:]))
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func testCA(t *testing.T) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "e2e upstream CA " + randHex(4)},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	return c, key
}

func leafFor(t *testing.T, host string, ca *x509.Certificate, caKey *ecdsa.PrivateKey) tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// TestRunSecretThroughTheCLI: `airlock run --secret` on an ephemeral VM
// reads the secret's metadata from the settings and its value from the
// environment variable they name, trusts --upstream-ca, and the task gets
// only the placeholder.
func TestRunSecretThroughTheCLI(t *testing.T) {
	upCA, upKey := testCA(t)
	seen := make(chan string, 4)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Get("Authorization")
		rw.Write([]byte("ok"))
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{leafFor(t, "cli.test", upCA, upKey)}}
	srv.StartTLS()
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())

	home := t.TempDir()
	caFile := filepath.Join(home, "upstream-ca.pem")
	os.WriteFile(caFile, pemCert(upCA), 0o644)
	value, ph := "cli-live-"+randHex(16), "airlock_ph_cli_token_"+randHex(12)
	settingsJSON := fmt.Sprintf(`{"secrets": [{"name": "CLI_TOKEN", "hosts": ["cli.test"], "source": "env:E2E_CLI_TOKEN", "placeholder": %q}]}`, ph)
	os.MkdirAll(filepath.Join(home, "config", "airlock"), 0o700)
	os.WriteFile(filepath.Join(home, "config", "airlock", "settings.json"), []byte(settingsJSON), 0o600)

	ws := newWorkspace(t)
	build := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(ws, "credprobe"), "./testdata/credprobe")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build credprobe: %v\n%s", err, out)
	}
	run := func(args ...string) (int, string) {
		cmd := exec.Command(airlockBin, args...)
		cmd.Env = append(os.Environ(), "AIRLOCK_IMAGE_DIR="+imageRoot, "XDG_RUNTIME_DIR="+t.TempDir(),
			"XDG_CONFIG_HOME="+filepath.Join(home, "config"), "XDG_STATE_HOME="+filepath.Join(home, "state"),
			"XDG_CACHE_HOME="+filepath.Join(home, "cache"), "E2E_CLI_TOKEN="+value)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, string(out)
	}
	code, out := run("run", "--workspace", ws, "--allow", "cli.test:"+port, "--map-host", "cli.test=127.0.0.1", "--upstream-ca", caFile, "--secret", "CLI_TOKEN", "--",
		"sh", "-c", `echo "env=$CLI_TOKEN"; /workspace/credprobe get https://cli.test:`+port+`/ Authorization "Bearer $CLI_TOKEN"`)
	if code != 0 || !strings.Contains(out, "env="+ph) || !strings.Contains(out, "status=200") || strings.Contains(out, value) {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	if got := <-seen; got != "Bearer "+value {
		t.Fatalf("cli.test received %q", got)
	}
	if code, out := run("run", "--workspace", ws, "--secret", "NOPE", "--", "true"); code != 125 || !strings.Contains(out, "NOPE") {
		t.Fatalf("unknown secret: exit %d %s", code, out)
	}
	filepath.WalkDir(home, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if b, _ := os.ReadFile(path); bytes.Contains(b, []byte(value)) {
				t.Errorf("%s holds the secret", path)
			}
		}
		return nil
	})
}

func pemCert(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}
