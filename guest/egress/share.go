package egress

import (
	"bytes"
	"container/list"
	"encoding/base64"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"

	"github.com/airlock-sandbox/airlock/guest/api"
)

// Tasks are the proxy credentials of the tasks running in the guest: the
// agent adds a task's as it starts it (Add). A Forwarder with Tasks gives
// each task, told apart by the credential its connections carry, its own
// share of the connections (Config.TaskConns), so that one task cannot use
// them up for the others. A credential is taken only when Tasks holds it,
// user and password: a made-up one cannot buy a task more shares, nor
// charge another task's. Connections with no known credential (a tool that
// drops it from the proxy URL, or an unknown one, which the host refuses)
// share one more share between them.
type Tasks struct {
	mu    sync.Mutex
	creds map[string]int // "user:pass" -> tasks running with it
}

// Add adds the credential in env's proxy variables (HTTP_PROXY,
// HTTPS_PROXY, ALL_PROXY, in either case, pointing at the guest's proxies:
// see app/egress.ProxyEnv) and returns the function that removes it again.
// Without one it adds nothing.
func (t *Tasks) Add(env []string) (remove func()) {
	var keys []string
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		switch strings.ToUpper(k) {
		case "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY":
		default:
			continue
		}
		u, err := url.Parse(v)
		if err != nil || u.User == nil || (u.Host != HTTPAddr && u.Host != SOCKSAddr) {
			continue
		}
		pass, ok := u.User.Password()
		if key := credKey(u.User.Username(), pass); ok && !containsString(keys, key) {
			keys = append(keys, key)
		}
	}
	if len(keys) == 0 {
		return func() {}
	}
	t.mu.Lock()
	if t.creds == nil {
		t.creds = map[string]int{}
	}
	for _, k := range keys {
		t.creds[k]++
	}
	t.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			t.mu.Lock()
			defer t.mu.Unlock()
			for _, k := range keys {
				if t.creds[k]--; t.creds[k] <= 0 {
					delete(t.creds, k)
				}
			}
		})
	}
}

func containsString(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func credKey(user, pass string) string { return user + ":" + pass }

// share is the key a credential is counted under: its user when a running
// task has it, else "" (the share of connections without a known one).
func (t *Tasks) share(user, pass string, found bool) string {
	if !found {
		return ""
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.creds[credKey(user, pass)] > 0 {
		return user
	}
	return ""
}

// shares counts connections per task, and the ones whose task is not known
// yet (pending: the credential comes with the first bytes).
type shares struct {
	max, maxPending int

	mu      sync.Mutex
	perTask map[string]int
	pending list.List // of *pendingConn, oldest first
}

// pendingConn is a connection whose task is not known yet.
type pendingConn struct {
	close   func()
	elem    *list.Element // nil once it left the pending list
	evicted bool
}

// wait adds a connection to the pending ones; when they are at their
// bound, the oldest is closed to make room. A task holding connections
// open without showing a credential gains nothing by it: honest clients
// send theirs with their first bytes.
func (s *shares) wait(closeConn func()) *pendingConn {
	p := &pendingConn{close: closeConn}
	s.mu.Lock()
	var evict *pendingConn
	if s.pending.Len() >= s.maxPending {
		evict = s.pending.Remove(s.pending.Front()).(*pendingConn)
		evict.elem, evict.evicted = nil, true
	}
	p.elem = s.pending.PushBack(p)
	s.mu.Unlock()
	if evict != nil {
		evict.close()
	}
	return p
}

// admit moves p from the pending connections to key's share, if that has
// room and p was not closed to make room for another. Either way p is no
// longer pending.
func (s *shares) admit(p *pendingConn, key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.elem != nil {
		s.pending.Remove(p.elem)
		p.elem = nil
	}
	if p.evicted || s.perTask[key] >= s.max {
		return false
	}
	s.perTask[key]++
	return true
}

// leave ends p's wait without admitting it.
func (s *shares) leave(p *pendingConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.elem != nil {
		s.pending.Remove(p.elem)
		p.elem = nil
	}
}

// release gives a connection's place in key's share back.
func (s *shares) release(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.perTask[key]--; s.perTask[key] <= 0 {
		delete(s.perTask, key)
	}
}

// Limits of what identify reads. The host refuses a longer HTTP head or a
// slower one (app/egress: DefaultMaxHeaderBytes, DefaultHeaderTimeout), so
// a connection that is neither is no use to its task either.
const (
	maxHead = 32 << 10
	// A SOCKS5 greeting (2+255) and username/password request (3+255+255).
	maxSOCKSHead = 2 + 255 + 3 + 255 + 255
)

// identify reads the start of a client's stream from c until it has the
// proxy credential (HTTP's Proxy-Authorization, SOCKS5's
// username/password) or knows there is none; found says whether one was
// there. It passes each read on to h as it comes, but the one that
// completes the request head (or the SOCKS5 greeting or credential that
// settles it), which it returns as rest, to be passed on once the
// connection is admitted: a task over its share never gets a whole request
// to the host, and the host's own deadlines for a slow head still run (and
// are logged there). It stops at the first error; the caller's copy sees
// the same error again.
func identify(c io.Reader, h io.Writer, port uint32) (user, pass string, found bool, rest []byte) {
	var parse func(head []byte, seen int) (user, pass string, found, done bool)
	limit := maxHead
	switch port {
	case api.PortEgressHTTP:
		parse = parseHTTPCred
	case api.PortEgressSOCKS:
		parse, limit = parseSOCKSCred, maxSOCKSHead
	default:
		return "", "", false, nil
	}
	var head []byte
	rb := make([]byte, 4096)
	for len(head) < limit {
		n, err := c.Read(rb[:min(len(rb), limit-len(head))])
		if n > 0 {
			seen := len(head)
			head = append(head, rb[:n]...)
			if user, pass, found, done := parse(head, seen); done {
				return user, pass, found, rb[:n]
			}
			if _, werr := h.Write(rb[:n]); werr != nil {
				return "", "", false, nil
			}
		}
		if err != nil {
			break
		}
	}
	return "", "", false, nil
}

// parseHTTPCred finds the Basic credential of Proxy-Authorization in an
// HTTP request head; done once the head is complete. seen bytes of head
// were looked at before: the end of the head is looked for after them
// only, so a head dripped a byte at a time costs no more than one.
func parseHTTPCred(head []byte, seen int) (user, pass string, found, done bool) {
	from := max(0, seen-3)
	i := bytes.Index(head[from:], []byte("\r\n\r\n"))
	if i < 0 {
		return "", "", false, false
	}
	for _, line := range bytes.Split(head[:from+i], []byte("\r\n"))[1:] {
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok || !strings.EqualFold(string(bytes.TrimSpace(name)), "Proxy-Authorization") {
			continue
		}
		scheme, cred, ok := strings.Cut(strings.TrimSpace(string(value)), " ")
		if !ok || !strings.EqualFold(scheme, "Basic") {
			return "", "", false, true
		}
		dec, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
		if err != nil {
			return "", "", false, true
		}
		user, pass, ok := strings.Cut(string(dec), ":")
		return user, pass, ok, true
	}
	return "", "", false, true
}

// parseSOCKSCred finds the username/password request (RFC 1929) after a
// SOCKS5 greeting that offers it; done once it has it or knows it will
// not come: the greeting does not offer it, or the request that follows is
// the SOCKS request itself (the host chose no authentication).
func parseSOCKSCred(b []byte, _ int) (user, pass string, found, done bool) {
	if len(b) < 2 {
		return "", "", false, false
	}
	if b[0] != 5 {
		return "", "", false, true
	}
	n := 2 + int(b[1])
	if len(b) < n {
		return "", "", false, false
	}
	if bytes.IndexByte(b[2:n], 0x02) < 0 {
		return "", "", false, true
	}
	r := b[n:]
	if len(r) < 2 {
		return "", "", false, false
	}
	if r[0] != 1 {
		return "", "", false, true
	}
	ulen := int(r[1])
	if len(r) < 2+ulen+1 {
		return "", "", false, false
	}
	plen := int(r[2+ulen])
	if len(r) < 3+ulen+plen {
		return "", "", false, false
	}
	return string(r[2 : 2+ulen]), string(r[3+ulen : 3+ulen+plen]), true, true
}

// closer closes a connection so that its peer sees a reset.
func closer(c net.Conn) func() { return func() { reset(c) } }
