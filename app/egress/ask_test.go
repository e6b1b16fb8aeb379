package egress

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// funcDecider adapts a function and counts calls.
type funcDecider struct {
	calls atomic.Int32
	f     func(context.Context, Request) (Verdict, error)
}

func (d *funcDecider) Decide(ctx context.Context, r Request) (Verdict, error) {
	d.calls.Add(1)
	return d.f(ctx, r)
}

func TestAsk(t *testing.T) {
	srv := httptest.NewServer(origin())
	defer srv.Close()
	port := portOf(t, srv.Listener.Addr().String())
	addr := srv.Listener.Addr().String()
	tests := []struct {
		name     string
		verdict  Verdict
		err      error
		block    bool
		host     string
		first    Reason
		second   Reason
		asked    int32
		secondOK bool
		detail   string
	}{
		{name: "allow once", verdict: AllowOnce, host: "pub.test", first: ReasonAllowedByAsk, second: ReasonAllowedByAsk, asked: 2},
		{name: "allow always", verdict: AllowAlways, host: "pub.test", first: ReasonAllowedByAsk, second: ReasonAllowedByRule, asked: 1},
		{name: "deny", verdict: Deny, host: "pub.test", first: ReasonAskDenied, second: ReasonAskDenied, asked: 2},
		{name: "nobody to ask", err: ErrNobodyToAsk, host: "pub.test", first: ReasonNoMatchingRule, second: ReasonNoMatchingRule, asked: 2, detail: "denied (no window to ask)"},
		{name: "error", err: errors.New("ui gone"), host: "pub.test", first: ReasonAskFailed, second: ReasonAskFailed, asked: 2},
		{name: "timeout", block: true, host: "pub.test", first: ReasonAskTimeout, second: ReasonAskTimeout, asked: 2},
		{name: "ask never opens private", verdict: AllowAlways, host: "private.test", first: ReasonPrivateAddress, second: ReasonPrivateAddress, asked: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got Request
			dec := &funcDecider{f: func(ctx context.Context, r Request) (Verdict, error) {
				got = r
				if tt.block {
					<-ctx.Done()
					return Deny, ctx.Err()
				}
				return tt.verdict, tt.err
			}}
			tg := startGate(t, Config{
				Decider: dec, AskTimeout: 100 * time.Millisecond,
				Resolver: fakeResolver{"pub.test": {"8.8.8.8"}, "private.test": {"10.0.0.1"}},
				Dialer:   &redirectDialer{to: map[string]string{"8.8.8.8:" + port: addr}},
			})
			for i, want := range []Reason{tt.first, tt.second} {
				seq := len(tg.Recent())
				c := proxyClient(t, tg, "task-q", nil)
				resp, _ := get(t, c, "http://"+tt.host+":"+port+"/echo")
				if (resp.StatusCode == 200) != want.allowed() {
					t.Fatalf("request %d: %s; want %s", i, resp.Status, want)
				}
				d := waitDecision(t, tg.Gate, func(d Decision) bool { return d.Seq > uint64(seq) && d.Host == tt.host })
				if d.Reason != want || d.Task != "task-q" || !strings.Contains(d.Detail, tt.detail) {
					t.Fatalf("request %d: decision %+v; want %s %q", i, d, want, tt.detail)
				}
			}
			if n := dec.calls.Load(); n != tt.asked {
				t.Errorf("asked %d times; want %d", n, tt.asked)
			}
			if got.Task != "task-q" || got.Host != tt.host || got.Protocol != ProtoHTTP || got.Port == 0 {
				t.Errorf("asked %+v", got)
			}
		})
	}
}

func TestAskCoalescesAndCloseEndsQuestions(t *testing.T) {
	release := make(chan struct{})
	dec := &funcDecider{f: func(ctx context.Context, r Request) (Verdict, error) {
		select {
		case <-release:
			return Deny, nil
		case <-ctx.Done():
			return Deny, ctx.Err()
		}
	}}
	tg := startGate(t, Config{Decider: dec, AskTimeout: time.Minute})
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() {
			c, err := net.Dial("tcp", tg.httpAddr)
			if err != nil {
				return
			}
			defer c.Close()
			c.Write([]byte("CONNECT same.test:443 HTTP/1.1\r\n\r\n"))
			c.Read(make([]byte, 512))
		})
	}
	deadline := time.Now().Add(5 * time.Second)
	for dec.calls.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // let the other four join the open question
	if n := dec.calls.Load(); n != 1 {
		t.Fatalf("asked %d times for one host; want 1", n)
	}
	start := time.Now()
	if err := tg.Close(); err != nil {
		t.Fatal(err)
	}
	if time.Since(start) > 2*time.Second {
		t.Fatalf("Close waited %v for an open question", time.Since(start))
	}
	wg.Wait()
	for _, d := range tg.Recent() {
		if d.Reason != ReasonShutdown {
			t.Errorf("decision during shutdown: %+v", d)
		}
	}
	close(release)
}

// pipeListener hands out net.Pipe connections, which cannot half-close:
// like a transport without CloseWrite.
type pipeListener struct {
	conns  chan net.Conn
	closed chan struct{}
	once   sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error   { l.once.Do(func() { close(l.closed) }); return nil }
func (l *pipeListener) Addr() net.Addr { return pipeAddr{} }

func (l *pipeListener) dial() (net.Conn, error) {
	a, b := net.Pipe()
	select {
	case l.conns <- b:
		return a, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

func TestServeOnPipeListenerAndCloseCutsTunnels(t *testing.T) {
	srv := httptest.NewTLSServer(origin())
	defer srv.Close()
	g, err := New(Config{Allow: []string{"www.example.com"}, MapHosts: []string{"www.example.com=127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	l := newPipeListener()
	served := make(chan error, 1)
	go func() { served <- g.ServeHTTPProxy(l) }()
	tr := srv.Client().Transport.(*http.Transport).Clone()
	tr.Proxy = http.ProxyURL(mustURL("http://gate"))
	tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) { return l.dial() }
	c := &http.Client{Transport: tr}
	port := portOf(t, srv.Listener.Addr().String())
	resp, body := get(t, c, "https://www.example.com:"+port+"/blob")
	if resp.StatusCode != 200 || len(body) != len(blob) {
		t.Fatalf("%s, %d bytes", resp.Status, len(body))
	}
	// The tunnel is idle in the client's pool: Close must cut it.
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-served; !errors.Is(err, ErrClosed) {
		t.Fatalf("ServeHTTPProxy: %v", err)
	}
	d := wantDecision(t, g, ProtoConnect, "www.example.com", ReasonAllowedByRule)
	if d.BytesDown < int64(len(blob)) {
		t.Fatalf("decision %+v", d)
	}
	tr.CloseIdleConnections()
	checkNoGateGoroutines(t)
	if !strings.Contains(d.Rule, "map-host") {
		t.Errorf("rule %q", d.Rule)
	}
}
