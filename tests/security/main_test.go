//go:build e2e

// Package security attacks the real guest the way a prompt-injected agent
// would (issue 8, point 1): network escape, workspace escape, guest
// privilege, host control. Every attack is run from inside a booted VM (or,
// for the control API, as another host user) and asserts that it failed;
// network attacks also assert that the gate logged the refusal with the
// right reason. The run ends with a table of attacks per family.
//
// An attack that gets through fails its test, unless it is listed in
// knownHoles: then it is skipped with "KNOWN HOLE: …" and counted as such,
// so the suite stays green while the hole is open and says so loudly.
// AIRLOCK_SECURITY_STRICT=1 turns known holes into failures.
package security

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/app/egress"
	"github.com/airlock-sandbox/airlock/app/sandbox"
	"github.com/airlock-sandbox/airlock/guest/client"
	"github.com/airlock-sandbox/airlock/tests/internal/vmharness"
)

var (
	airlockBin string // the CLI under test (host control family)
	imageRoot  string // images/out
	image      sandbox.Image

	shared   *sandbox.Sandbox
	gate     *egress.Gate
	hostRoot string // holds the share, and secrets planted next to it
	sharedWS string // the shared VM's workspace on the host: hostRoot/ws
	secret   string // hostRoot/secret.txt: must never be readable in the guest

	canary      *canaryServer // on every host address: must never be reached
	allowedAddr string        // 127.0.0.2:PORT, the only upstream the gate may dial
	dials       dialLog       // every address the gate dialled
	hostLAN     string        // a non-loopback address of this host ("" when none)
)

// secretText is planted outside every share; finding it in guest output is
// a breach.
const secretText = "AIRLOCK-HOST-SECRET-7f3a9c"

// policy is the shared gate's policy. allowed.test is the one name that
// works (pinned to the allowed server on 127.0.0.2); secret.corp.test is
// allowed by the wildcard, denied by name and pinned to the canary, so a
// normalisation bypass of the deny entry would reach the canary.
// pinned.test is pinned to 127.0.0.2 too but allowed on the allowed
// server's port only, so the canary on that address is another port of a
// pinned name (egress29_test.go).
func policy() egress.Config {
	_, allowedPort, _ := strings.Cut(allowedAddr, ":")
	return egress.Config{
		Allow: []string{"allowed.test", "localhost", "*.corp.test", "ports.test:1",
			"rebind.test", "rebind6.test", "mapped.test", "meta.test", "lan.test", "mixed.test",
			"pinned.test:" + allowedPort, "siit.test", "teredo.test", "doc6.test"},
		Deny:     []string{"secret.corp.test"},
		MapHosts: []string{"allowed.test=127.0.0.2", "secret.corp.test=127.0.0.1", "pinned.test=127.0.0.2"},
	}
}

// fakeDNS stands in for the host's resolver: names that resolve to
// addresses the gate must refuse, and nothing else (no real DNS needed).
type fakeDNS struct{}

func (fakeDNS) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	m := map[string][]string{
		"localhost":    {"127.0.0.1", "::1"},
		"rebind.test":  {"127.0.0.1"},
		"rebind6.test": {"::1"},
		"mapped.test":  {"::ffff:127.0.0.1"},
		"meta.test":    {"169.254.169.254"},
		"mixed.test":   {"10.0.0.1", "fd00::1", "100.64.0.1"},
		"siit.test":    {"::ffff:0:7f00:1"},                      // SIIT form of 127.0.0.1
		"teredo.test":  {"2001:0:4136:e378:8000:63bf:3fff:fdd2"}, // Teredo
		"doc6.test":    {"3fff::1"},                              // IPv6 documentation (RFC 9637)
	}
	if hostLAN != "" {
		m["lan.test"] = []string{hostLAN}
	}
	var out []netip.Addr
	for _, s := range m[host] {
		out = append(out, netip.MustParseAddr(s))
	}
	if out == nil {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return out, nil
}

// dialLog records every address the gate dials.
type dialLog struct {
	mu    sync.Mutex
	addrs []string
}

func (l *dialLog) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	l.mu.Lock()
	l.addrs = append(l.addrs, addr)
	l.mu.Unlock()
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

func (l *dialLog) list() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.addrs...)
}

// canaryServer accepts on a port of every host address and counts
// connections: any connection is an escape.
type canaryServer struct {
	port string
	hits atomic.Int64
	ls   []net.Listener
}

func newCanary() (*canaryServer, error) {
	l, err := net.Listen("tcp", ":0") // dual stack: 127.0.0.1, ::1, the LAN address …
	if err != nil {
		return nil, err
	}
	c := &canaryServer{ls: []net.Listener{l}}
	_, c.port, _ = net.SplitHostPort(l.Addr().String())
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			c.hits.Add(1)
			fmt.Fprintf(conn, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(secretText), secretText)
			conn.Close()
		}
	}()
	return c, nil
}

func (c *canaryServer) close() {
	for _, l := range c.ls {
		l.Close()
	}
}

// allowedServer is the upstream of allowed.test.
func allowedServer() (net.Listener, error) {
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		return nil, err
	}
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				buf := make([]byte, 4096)
				for {
					conn.SetReadDeadline(time.Now().Add(10 * time.Second))
					n, err := conn.Read(buf)
					if err != nil || n == 0 {
						return
					}
					io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\nallowed")
				}
			}()
		}
	}()
	return l, nil
}

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	began := time.Now()
	env, err := vmharness.FromEnv("security")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	airlockBin, imageRoot, image = env.Bin, env.ImageRoot, env.Image
	if hostRoot, err = os.MkdirTemp("", "airlock-sec-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(hostRoot)
	os.Chmod(hostRoot, 0o755)
	secret = filepath.Join(hostRoot, "secret.txt")
	os.WriteFile(secret, []byte(secretText+"\n"), 0o644)
	os.Mkdir(filepath.Join(hostRoot, "secretdir"), 0o755)
	os.WriteFile(filepath.Join(hostRoot, "secretdir", "key"), []byte(secretText+"\n"), 0o644)
	sharedWS = filepath.Join(hostRoot, "ws")
	os.Mkdir(sharedWS, 0o755)
	sharedWS = ownedByTaskUser(sharedWS)
	hostLAN = lanAddress()

	if canary, err = newCanary(); err != nil {
		fmt.Fprintln(os.Stderr, "security: canary:", err)
		return 1
	}
	defer canary.close()
	al, err := allowedServer()
	if err != nil {
		fmt.Fprintln(os.Stderr, "security: allowed server:", err)
		return 1
	}
	defer al.Close()
	allowedAddr = al.Addr().String()

	cfg := policy()
	cfg.Resolver, cfg.Dialer = fakeDNS{}, &dials
	// The decision log lives apart: the inotify watch on hostRoot counts
	// any change next to the share as a breach.
	logDir, err := os.MkdirTemp("", "airlock-sec-log-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "security: decision log folder:", err)
		return 1
	}
	defer os.RemoveAll(logDir)
	decisionLog = filepath.Join(logDir, "egress.jsonl")
	cfg.LogFile = decisionLog
	if gate, err = egress.New(cfg); err != nil {
		fmt.Fprintln(os.Stderr, "security: egress gate:", err)
		return 1
	}
	defer gate.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	shared, err = vmharness.Boot(ctx, image, sandbox.Options{Workspace: sharedWS, MemoryMiB: 1024, Egress: gate})
	if err != nil {
		fmt.Fprintln(os.Stderr, "security: boot the shared VM:", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "security: shared VM ready in %s (%+v)\n", time.Since(began).Round(time.Millisecond), shared.Machine().Info())
	startWatch()
	code := m.Run()
	run := runLine(began)
	if err := vmharness.Close(shared); err != nil {
		fmt.Fprintln(os.Stderr, "security: close the shared VM:", err)
		code = 1
	}
	if !afterAll() {
		code = 1
	}
	board.print(os.Stdout, time.Since(began))
	board.mu.Lock()
	rep := report{Run: strings.Replace(run, "DURATION", time.Since(began).Round(time.Second).String(), 1), Findings: board.findings}
	board.mu.Unlock()
	if err := writeReport(rep); err != nil {
		fmt.Fprintln(os.Stderr, "security: write the report:", err)
		code = 1
	}
	// The committed report is root's run, which has every attack; a user's
	// run lacks those that need root (another host user, root's own folder).
	if os.Getenv("AIRLOCK_SECURITY_REPORT") == "" && os.Getuid() == 0 {
		if diff := compareReport(rep); diff != "" {
			fmt.Printf("security: docs/security-report.md differs from this run (make security-report rewrites it): %s\n", diff)
		}
	}
	return code
}

var ownedByTaskUser = vmharness.OwnedByTaskUser

// runLine says when and where the suite ran, for the report (DURATION is
// filled in at the end).
func runLine(began time.Time) string {
	who := "a user"
	if os.Getuid() == 0 {
		who = "root"
	}
	kernel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	info := shared.Machine().Info()
	served := ""
	if uid, err := processUID(info.PID); err == nil {
		served = fmt.Sprintf(" served by QEMU as uid %d", uid)
	}
	return fmt.Sprintf("%s, DURATION; Linux %s %s; Airlock as %s; QEMU %s, %s transport, %s workspace share%s; guest kernel %s",
		began.UTC().Format("2006-01-02 15:04 UTC"), strings.TrimSpace(string(kernel)), runtime.GOARCH, who,
		info.Accelerator, info.Transport, info.Share, served, image.KernelRelease)
}

// lanAddress is one non-loopback IPv4 address of this host.
func lanAddress() string {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			return n.IP.String()
		}
	}
	return ""
}

// ---- the score board --------------------------------------------------

// knownHoles are attacks that currently get through, by "family/name",
// with the issue and an explanation; their tests skip with KNOWN HOLE.
// Empty, and it should stay so: a hole is a bug to fix, and the list is
// only for the time between finding one and fixing it.
var knownHoles = map[string]string{
	"workspace escape/the task user plants a relative link moved towards the top": "issue 29 item 2: a link is checked where it is made; " +
		"rename(2) of it, or of its folder, is not (refusing reparenting in /workspace with Landlock would close it, at the cost of every cross-folder rename there)",
	"workspace escape/guest root plants a relative link moved towards the top": "issue 29 item 2: as for the task user",
}

type row struct{ attacks, blocked, holes, failed int }

type scoreBoard struct {
	mu       sync.Mutex
	rows     map[string]*row
	holes    []string
	findings []finding // for the report
}

var board = &scoreBoard{rows: map[string]*row{}}

func (b *scoreBoard) print(w io.Writer, took time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "\nsecurity suite (%s): attacks run from inside the real guest\n", took.Round(time.Second))
	fmt.Fprintf(&buf, "%-18s %8s %8s %12s %8s\n", "family", "attacks", "blocked", "known holes", "failed")
	var tot row
	for _, f := range families {
		r := b.rows[f]
		if r == nil {
			r = &row{}
		}
		fmt.Fprintf(&buf, "%-18s %8d %8d %12d %8d\n", f+":", r.attacks, r.blocked, r.holes, r.failed)
		tot.attacks += r.attacks
		tot.blocked += r.blocked
		tot.holes += r.holes
		tot.failed += r.failed
	}
	fmt.Fprintf(&buf, "%-18s %8d %8d %12d %8d\n", "total:", tot.attacks, tot.blocked, tot.holes, tot.failed)
	sort.Strings(b.holes)
	for _, h := range b.holes {
		fmt.Fprintf(&buf, "  KNOWN HOLE %s\n", h)
	}
	w.Write(buf.Bytes())
}

// Attack is one attack: its test, and how it ended.
type Attack struct {
	*testing.T
	key      string
	hole     bool
	breached bool
}

// attack runs one attack as a subtest and scores it: blocked when the
// test passed, a known hole when breach skipped it, failed otherwise
// (an unexpected breach, or the attack could not be run).
func attack(t *testing.T, family, name string, f func(a *Attack)) {
	t.Helper()
	t.Run(name, func(t *testing.T) {
		a := &Attack{T: t, key: family + "/" + name}
		defer func() {
			board.mu.Lock()
			defer board.mu.Unlock()
			r := board.rows[family]
			if r == nil {
				r = &row{}
				board.rows[family] = r
			}
			r.attacks++
			out := outBlocked
			switch {
			case a.breached:
				out = outThrough
			case t.Failed():
				out = outError
			}
			board.findings = append(board.findings, finding{family, name, out})
			switch {
			case a.hole:
				r.holes++
				board.holes = append(board.holes, a.key+": "+knownHoles[a.key])
			case t.Failed():
				r.failed++
			default:
				r.blocked++
				if note, ok := knownHoles[a.key]; ok {
					t.Logf("listed as a known hole (%s) but blocked now: remove it from knownHoles", note)
				}
			}
		}()
		f(a)
	})
}

// breach reports that the attack got through. A known hole is skipped
// (and counted) unless AIRLOCK_SECURITY_STRICT=1; anything else fails.
func (a *Attack) breach(format string, args ...any) {
	a.Helper()
	msg := fmt.Sprintf(format, args...)
	a.breached = true
	if note, ok := knownHoles[a.key]; ok && os.Getenv("AIRLOCK_SECURITY_STRICT") != "1" {
		a.hole = true
		a.Skipf("KNOWN HOLE: %s: %s (%s)", a.key, msg, note)
	}
	a.Fatalf("ATTACK SUCCEEDED: %s", msg)
}

// ---- running things in the guest ---------------------------------------

type result = vmharness.Result

// execOn runs spec on sb and returns what it printed.
func execOn(t testing.TB, sb *sandbox.Sandbox, spec client.Spec, stdin string) result {
	t.Helper()
	var in io.Reader
	if stdin != "" {
		in = strings.NewReader(stdin)
	}
	return vmharness.Exec(t, sb, spec, in)
}

// user runs a shell command as the task user (uid 1000) on the shared VM.
func user(t testing.TB, cmd string) result {
	t.Helper()
	return execOn(t, shared, client.Spec{Argv: []string{"sh", "-c", cmd}}, "")
}

// root runs a shell command as root on the shared VM (what --root and the
// MCP tool's root flag give an agent).
func root(t testing.TB, cmd string) result {
	t.Helper()
	return execOn(t, shared, client.Spec{Argv: []string{"sh", "-c", cmd}, Root: true}, "")
}

var taskN atomic.Int64

// netTask runs cmd as the task user with a fresh task id and its proxy
// environment, and returns the task id and result.
func netTask(t testing.TB, cmd, stdin string) (string, result) {
	t.Helper()
	id := fmt.Sprintf("sec-%d", taskN.Add(1))
	u, p := gate.Credentials(id)
	return id, execOn(t, shared, client.Spec{ID: id, Argv: []string{"sh", "-c", cmd}, Env: egress.ProxyEnv(u, p)}, stdin)
}

// probe builds the probe program into the shared workspace once and
// returns its guest path.
func probe(t testing.TB) string {
	t.Helper()
	if err := vmharness.BuildProbe(filepath.Join(sharedWS, "probe")); err != nil {
		t.Fatal(err)
	}
	return "/workspace/probe"
}

// decisionsOf waits until the gate logged at least n decisions for task and
// returns them (the gate records a decision when the connection ends).
func decisionsOf(t testing.TB, task string, n int) []egress.Decision {
	t.Helper()
	var got []egress.Decision
	for i := 0; i < 100; i++ {
		got = got[:0]
		for _, d := range gate.Recent() {
			if d.Task == task {
				got = append(got, d)
			}
		}
		if len(got) >= n {
			return got
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("the gate logged %d decisions for task %s, want %d: %+v", len(got), task, n, got)
	return nil
}

// since returns the decisions with a sequence number above seq that match.
func since(seq uint64, match func(egress.Decision) bool) []egress.Decision {
	var out []egress.Decision
	for _, d := range gate.Recent() {
		if d.Seq > seq && match(d) {
			out = append(out, d)
		}
	}
	return out
}

func lastSeq() uint64 {
	var s uint64
	for _, d := range gate.Recent() {
		s = max(s, d.Seq)
	}
	return s
}

// refused reports whether out says the kernel refused for lack of privilege.
func refused(out string) bool {
	out = strings.ToLower(out)
	for _, s := range []string{"operation not permitted", "permission denied", "not permitted", "eperm", "eacces"} {
		if strings.Contains(out, s) {
			return true
		}
	}
	return false
}

// afterAll checks, once every attack has run, what the host saw: the gate
// dialled nothing but the allowed upstream, the canary was never reached,
// and nothing outside the shares was touched. Each is scored as an attack.
func afterAll() bool {
	ok := true
	score := func(family, name string, breach string) {
		board.mu.Lock()
		defer board.mu.Unlock()
		r := board.rows[family]
		if r == nil {
			r = &row{}
			board.rows[family] = r
		}
		r.attacks++
		out := outBlocked
		if breach != "" {
			out = outThrough
		}
		board.findings = append(board.findings, finding{family, name, out})
		if breach == "" {
			r.blocked++
			return
		}
		r.failed++
		ok = false
		fmt.Printf("--- FAIL: %s/%s: ATTACK SUCCEEDED: %s\n", family, name, breach)
	}
	var bad []string
	for _, a := range dials.list() {
		if a != allowedAddr {
			bad = append(bad, a)
		}
	}
	score(netFamily, "all attacks: the gate dialled only the allowed upstream", strings.Join(bad, " "))
	hits := ""
	if n := canary.hits.Load(); n > 0 {
		hits = fmt.Sprintf("the canary on every host address was reached %d times", n)
	}
	score(netFamily, "all attacks: the host canary was never reached", hits)
	score(wsFamily, "all attacks: nothing next to the shares was opened or changed (inotify)", stopWatch())
	return ok
}
