package egress

import (
	"bytes"
	"encoding/base64"
	"io"
	"net"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/guest/api"
	"github.com/airlock-sandbox/airlock/internal/leakcheck"
)

func proxyEnv(user, pass string) []string {
	return []string{
		"HTTP_PROXY=http://" + user + ":" + pass + "@" + HTTPAddr,
		"ALL_PROXY=socks5h://" + user + ":" + pass + "@" + SOCKSAddr,
		"PATH=/bin",
	}
}

func httpHead(user, pass string) []byte {
	auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
	return []byte("CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\nProxy-Authorization: Basic " + auth + "\r\n\r\n")
}

// received reads what the host got on h within a short while.
func received(h *hostConn, n int) ([]byte, error) {
	b := make([]byte, n)
	done := make(chan error, 1)
	go func() { _, err := io.ReadFull(h, b); done <- err }()
	select {
	case err := <-done:
		return b, err
	case <-time.After(5 * time.Second):
		h.Close()
		<-done
		return nil, io.ErrNoProgress
	}
}

// TestTaskShare: a task gets TaskConns connections, no more; another task,
// and connections without a known credential, still get theirs; a
// connection over the share never gets its request to the host.
func TestTaskShare(t *testing.T) {
	leakcheck.Goroutines(t)
	tasks := &Tasks{}
	removeA := tasks.Add(proxyEnv("ta", "pa"))
	defer removeA()
	defer tasks.Add(proxyEnv("tb", "pb"))()
	host := newFakeHost(api.PortEgressHTTP)
	_, addr := serve(t, Config{Dial: host.Dial, MaxConns: 32, TaskConns: 3, Tasks: tasks}, api.PortEgressHTTP)
	var held []*hostConn
	defer func() {
		for _, h := range held {
			h.Close()
		}
	}()
	open := func(head []byte) *net.TCPConn {
		c := dial(t, addr)
		if _, err := c.Write(head); err != nil {
			t.Fatal(err)
		}
		return c
	}
	admitted := func(name string, head []byte) {
		t.Helper()
		open(head)
		h := host.accept(t, api.PortEgressHTTP)
		held = append(held, h)
		if got, err := received(h, len(head)); err != nil || !bytes.Equal(got, head) {
			t.Fatalf("%s: the host got %q, %v", name, got, err)
		}
	}
	for range 3 {
		admitted("task A", httpHead("ta", "pa"))
	}
	c := open(httpHead("ta", "pa"))
	h := host.accept(t, api.PortEgressHTTP) // dialled before the credential came
	if got, err := received(h, 1); err == nil {
		t.Errorf("task A's connection over its share reached the host: %q", got)
	}
	expectClosedFast(t, c, time.Second)

	admitted("task B", httpHead("tb", "pb"))
	// A made-up password is no credential: those share one share.
	for range 3 {
		admitted("unknown credential", httpHead("ta", "wrong"))
	}
	c = open(httpHead("tb", "wrong"))
	host.accept(t, api.PortEgressHTTP).Close()
	expectClosedFast(t, c, time.Second)

	// A task that ended takes its credential with it.
	removeA()
	c = open(httpHead("ta", "pa"))
	host.accept(t, api.PortEgressHTTP).Close()
	expectClosedFast(t, c, time.Second)
}

// TestSOCKSShare: the SOCKS5 credential counts; the greeting reaches the
// host at once, the request only once the connection is admitted.
func TestSOCKSShare(t *testing.T) {
	leakcheck.Goroutines(t)
	tasks := &Tasks{}
	defer tasks.Add(proxyEnv("ta", "pa"))()
	host := newFakeHost(api.PortEgressSOCKS)
	_, addr := serve(t, Config{Dial: host.Dial, MaxConns: 32, TaskConns: 1, Tasks: tasks}, api.PortEgressSOCKS)
	greeting := []byte{5, 1, 2}
	auth := append(append([]byte{1, 2}, "ta"...), append([]byte{2}, "pa"...)...)
	request := []byte{5, 1, 0, 3, 1, 'x', 0, 80}
	socks := func() (net.Conn, *hostConn) {
		c := dial(t, addr)
		c.Write(greeting)
		h := host.accept(t, api.PortEgressSOCKS)
		if got, err := received(h, len(greeting)); err != nil || !bytes.Equal(got, greeting) {
			t.Fatalf("greeting: the host got %q, %v", got, err)
		}
		h.Write([]byte{5, 2})
		b := make([]byte, 2)
		if _, err := io.ReadFull(c, b); err != nil {
			t.Fatalf("method: %v", err)
		}
		c.Write(append(auth[:len(auth):len(auth)], request...))
		return c, h
	}
	c1, h1 := socks()
	defer h1.Close()
	if got, err := received(h1, len(auth)+len(request)); err != nil || !bytes.Equal(got, append(auth, request...)) {
		t.Fatalf("the host got %q, %v", got, err)
	}
	_ = c1
	c2, h2 := socks()
	defer h2.Close()
	if got, err := received(h2, 1); err == nil {
		t.Errorf("a connection over the task's share reached the host: %q", got)
	}
	expectClosedFast(t, c2, time.Second)
}

// TestPendingBound: connections that never show a credential cannot hold
// the forwarder: beyond PendingConns the oldest is closed, and each is
// closed after HeadTimeout.
func TestPendingBound(t *testing.T) {
	leakcheck.Goroutines(t)
	tasks := &Tasks{}
	defer tasks.Add(proxyEnv("ta", "pa"))()
	host := newFakeHost(api.PortEgressHTTP)
	_, addr := serve(t, Config{Dial: host.Dial, MaxConns: 32, PendingConns: 2, HeadTimeout: 2 * time.Second, Tasks: tasks}, api.PortEgressHTTP)
	var held []*hostConn
	defer func() {
		for _, h := range held {
			h.Close()
		}
	}()
	var silent []net.Conn
	for range 2 {
		silent = append(silent, dial(t, addr))
		held = append(held, host.accept(t, api.PortEgressHTTP))
	}
	c := dial(t, addr)
	c.Write(httpHead("ta", "pa"))
	held = append(held, host.accept(t, api.PortEgressHTTP))
	expectClosedFast(t, silent[0], time.Second)
	if got, err := received(held[2], len(httpHead("ta", "pa"))); err != nil {
		t.Fatalf("the task's connection: %q, %v", got, err)
	}
	start := time.Now()
	expectClosedFast(t, silent[1], 5*time.Second)
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("a silent connection stayed %s", d)
	}
}

// TestIdleTimeout: a connection that carries nothing for IdleTimeout is
// closed; one that keeps moving bytes is not.
func TestIdleTimeout(t *testing.T) {
	leakcheck.Goroutines(t)
	host := newFakeHost(api.PortEgressHTTP)
	_, addr := serve(t, Config{Dial: host.Dial, IdleTimeout: 200 * time.Millisecond}, api.PortEgressHTTP)
	quiet := dial(t, addr)
	hq := host.accept(t, api.PortEgressHTTP)
	defer hq.Close()
	busy := dial(t, addr)
	hb := host.accept(t, api.PortEgressHTTP)
	defer hb.Close()
	go io.Copy(io.Discard, hb)
	for range 10 {
		if _, err := busy.Write([]byte("x")); err != nil {
			t.Fatalf("a busy connection was closed: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	expectClosedFast(t, quiet, time.Second)
	if _, err := busy.Write([]byte("x")); err != nil {
		t.Fatalf("a busy connection was closed: %v", err)
	}
}

func TestParseCredentials(t *testing.T) {
	head := httpHead("u", "p:q")
	for i := 1; i <= len(head); i++ {
		u, p, found, done := parseHTTPCred(head[:i], i-1)
		if done != (i == len(head)) {
			t.Fatalf("HTTP head of %d/%d bytes: done %v", i, len(head), done)
		}
		if done && (u != "u" || p != "p:q" || !found) {
			t.Errorf("HTTP: %q %q %v", u, p, found)
		}
	}
	if _, _, found, done := parseHTTPCred([]byte("GET http://x/ HTTP/1.1\r\nHost: x\r\n\r\n"), 0); found || !done {
		t.Errorf("HTTP without credential: found %v done %v", found, done)
	}
	for _, tt := range []struct {
		b           []byte
		user        string
		found, done bool
	}{
		{[]byte{5}, "", false, false},
		{[]byte{4, 1, 0}, "", false, true},
		{[]byte{5, 1, 0}, "", false, true},
		{[]byte{5, 2, 0, 2}, "", false, false},
		{[]byte{5, 2, 0, 2, 5, 1, 0}, "", false, true},
		{[]byte{5, 1, 2, 1, 1, 'u', 1}, "", false, false},
		{[]byte{5, 1, 2, 1, 1, 'u', 1, 'p'}, "u", true, true},
	} {
		u, p, found, done := parseSOCKSCred(tt.b, 0)
		if u != tt.user || found != tt.found || done != tt.done || (found && p != "p") {
			t.Errorf("SOCKS % x: %q %q %v %v", tt.b, u, p, found, done)
		}
	}
}

func TestTasksAdd(t *testing.T) {
	tasks := &Tasks{}
	r1 := tasks.Add(proxyEnv("ta", "pa"))
	r2 := tasks.Add(proxyEnv("ta", "pa"))
	tasks.Add([]string{"HTTP_PROXY=http://tx:px@10.0.0.1:3128", "https_proxy=http://ty@127.0.0.1:3128"})
	if got := tasks.share("ta", "pa", true); got != "ta" {
		t.Errorf("share = %q", got)
	}
	for _, c := range [][2]string{{"tx", "px"}, {"ty", ""}, {"ta", "pb"}} {
		if got := tasks.share(c[0], c[1], true); got != "" {
			t.Errorf("%v is not a guest proxy credential, but share = %q", c, got)
		}
	}
	r1()
	r1()
	if got := tasks.share("ta", "pa", true); got != "ta" {
		t.Errorf("one of two tasks with the credential ended: share = %q", got)
	}
	r2()
	if got := tasks.share("ta", "pa", true); got != "" {
		t.Errorf("after both ended: share = %q", got)
	}
}
