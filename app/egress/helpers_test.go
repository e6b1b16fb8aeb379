package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeResolver answers from a table; unknown names fail.
type fakeResolver map[string][]string

func (r fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	list, ok := r[host]
	if !ok {
		return nil, fmt.Errorf("lookup %s: no such host", host)
	}
	var out []netip.Addr
	for _, s := range list {
		out = append(out, netip.MustParseAddr(s))
	}
	return out, nil
}

// redirectDialer dials real loopback servers in place of the (fake, public)
// addresses the gate decided on, and records what the gate asked for: the
// tests reach "8.8.8.8:80" without the internet and check that exactly the
// checked address was dialled.
type redirectDialer struct {
	to map[string]string // gate's address -> real address

	mu     sync.Mutex
	dialed []string
}

func (d *redirectDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	d.mu.Lock()
	d.dialed = append(d.dialed, addr)
	real, ok := d.to[addr]
	d.mu.Unlock()
	if !ok {
		if ap, err := netip.ParseAddrPort(addr); err != nil || !ap.Addr().IsLoopback() {
			return nil, fmt.Errorf("test dialer: refusing to dial %s outside loopback", addr)
		}
		real = addr
	}
	var nd net.Dialer
	return nd.DialContext(ctx, network, real)
}

func (d *redirectDialer) calls() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.dialed...)
}

// testGate is a gate serving both protocols on loopback listeners.
type testGate struct {
	*Gate
	httpAddr, socksAddr string
	dialer              *redirectDialer
}

// startGate starts a gate; cleanup closes it, checks both Serve calls
// returned ErrClosed, and that no gate goroutine is left.
func startGate(t *testing.T, cfg Config) *testGate {
	t.Helper()
	d, _ := cfg.Dialer.(*redirectDialer)
	if cfg.Dialer == nil {
		d = &redirectDialer{}
		cfg.Dialer = d
	}
	if cfg.Resolver == nil {
		cfg.Resolver = fakeResolver{}
	}
	g, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	sl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	go func() { errs <- g.ServeHTTPProxy(hl) }()
	go func() { errs <- g.ServeSOCKS(sl) }()
	t.Cleanup(func() {
		if err := g.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		for range 2 {
			if err := <-errs; !errors.Is(err, ErrClosed) {
				t.Errorf("Serve returned %v; want ErrClosed", err)
			}
		}
		checkNoGateGoroutines(t)
	})
	return &testGate{Gate: g, httpAddr: hl.Addr().String(), socksAddr: sl.Addr().String(), dialer: d}
}

// checkNoGateGoroutines fails if a goroutine running this package's
// non-test code outlives the gate.
func checkNoGateGoroutines(t *testing.T) {
	t.Helper()
	var leaked []string
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		leaked = leaked[:0]
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "app/egress.(*Gate)") || strings.Contains(g, "app/egress.relay") ||
				strings.Contains(g, "app/egress.(*journal)") {
				leaked = append(leaked, g)
			}
		}
		if len(leaked) == 0 {
			return
		}
	}
	t.Errorf("%d gate goroutines leaked after Close:\n%s", len(leaked), strings.Join(leaked, "\n\n"))
}

// waitDecision waits for a decision matching ok to be recorded.
func waitDecision(t *testing.T, g *Gate, ok func(Decision) bool) Decision {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		for _, d := range g.Recent() {
			if ok(d) {
				return d
			}
		}
	}
	t.Fatalf("no matching decision; have:\n%s", dumpDecisions(g.Recent()))
	return Decision{}
}

// wantDecision waits for the decision about host with the given reason.
func wantDecision(t *testing.T, g *Gate, proto Protocol, host string, reason Reason) Decision {
	t.Helper()
	return waitDecision(t, g, func(d Decision) bool {
		return d.Protocol == proto && d.Host == host && d.Reason == reason
	})
}

func dumpDecisions(ds []Decision) string {
	var b strings.Builder
	for _, d := range ds {
		fmt.Fprintf(&b, "  %s task=%q %s:%d addr=%s %s %s rule=%q up=%d down=%d %s\n",
			d.Protocol, d.Task, d.Host, d.Port, d.Addr, d.Action, d.Reason, d.Rule, d.BytesUp, d.BytesDown, d.Detail)
	}
	return b.String()
}

// portOf returns the port of a host:port.
func portOf(t *testing.T, hostport string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(hostport)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}
