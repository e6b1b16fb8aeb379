package egress

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock/guest/api/egresswire"
)

// ErrClosed is returned by the Serve methods after Close.
var ErrClosed = errors.New("egress: gate closed")

// Resolver looks up the addresses of a name. *net.Resolver satisfies it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Dialer opens upstream connections. *net.Dialer satisfies it. The gate
// always passes an IP:port, never a name.
type Dialer interface {
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// Config configures a Gate. The zero value is a gate that denies everything.
type Config struct {
	// Allow and Deny are policy entries (see ParseEntry); deny wins.
	Allow, Deny []string
	// MapHosts are NAME=ADDR pins (see ParseMapHost).
	MapHosts []string
	// Resolver resolves names; nil means net.DefaultResolver.
	Resolver Resolver
	// Dialer dials upstreams; nil means a net.Dialer.
	Dialer Dialer
	// LogFile, if set, receives one JSON line per Decision (O_APPEND),
	// and is rotated to LogFile.1 (and so on, LogKeep of them) before it
	// grows past LogMaxBytes; 0 means DefaultLogMaxBytes.
	LogFile     string
	LogMaxBytes int64
	// Decider is asked when no rule matches; nil means deny.
	Decider Decider
	// AskTimeout bounds one Decide call; 0 means DefaultAskTimeout.
	AskTimeout time.Duration
	// RequireCredential refuses connections that carry no credential.
	// Without it such connections are decided with task "".
	RequireCredential bool
	// Limits bounds sizes and waits; zero fields take the defaults.
	Limits Limits
	// Logger receives operational messages; nil discards them.
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	// CA, when set, lets the gate terminate the guest's TLS for the hosts
	// of Secrets (and for every host with Inspect). Without it tunnels
	// are never opened and secrets cannot be added.
	CA *CA
	// Secrets are added on the way out (see Secret); SetSecrets replaces them.
	Secrets []Secret
	// Inspect terminates TLS for every host, not just those of a secret,
	// so placeholders are looked for everywhere. Needs CA.
	Inspect bool
	// UpstreamRoots verify real servers where the gate terminates TLS;
	// nil means the system's roots (see UpstreamRoots).
	UpstreamRoots *x509.CertPool
	// UpstreamProxy, if set (http://[user:pass@]host:port), is an HTTP
	// proxy every upstream connection goes through with CONNECT.
	UpstreamProxy string
}

// Limits bounds what a guest can make the gate hold or wait for.
type Limits struct {
	// MaxHeaderBytes bounds an HTTP request head (request line and
	// headers) and a response head.
	MaxHeaderBytes int
	// HeaderTimeout bounds reading one request head (HTTP) or the whole
	// handshake (SOCKS) once it started: slow clients are cut off.
	HeaderTimeout time.Duration
	// IdleTimeout bounds the wait for the next request on a keep-alive
	// HTTP connection.
	IdleTimeout time.Duration
	// ResolveTimeout bounds one name lookup.
	ResolveTimeout time.Duration
	// DialTimeout bounds connecting to one upstream address.
	DialTimeout time.Duration
	// ResponseTimeout bounds waiting for a plain-HTTP response head.
	ResponseTimeout time.Duration
	// Recent is how many decisions Recent keeps.
	Recent int
	// MaxConns bounds the guest connections served at once (both
	// protocols); more are refused (too-many-connections).
	MaxConns int
	// RepeatInterval is how often repeated identical refusals are
	// summarised in the decision log (see Decision.Repeated).
	RepeatInterval time.Duration
}

// Defaults for zero Config fields.
const (
	DefaultAskTimeout      = 30 * time.Second
	DefaultMaxHeaderBytes  = 32 << 10
	DefaultHeaderTimeout   = 10 * time.Second
	DefaultIdleTimeout     = 90 * time.Second
	DefaultResolveTimeout  = 5 * time.Second
	DefaultDialTimeout     = 10 * time.Second
	DefaultResponseTimeout = 60 * time.Second
	DefaultRecent          = 1000
	DefaultMaxConns        = 1024
	DefaultRepeatInterval  = 5 * time.Second
)

func (l Limits) withDefaults() Limits {
	def := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.HeaderTimeout, DefaultHeaderTimeout)
	def(&l.IdleTimeout, DefaultIdleTimeout)
	def(&l.ResolveTimeout, DefaultResolveTimeout)
	def(&l.DialTimeout, DefaultDialTimeout)
	def(&l.ResponseTimeout, DefaultResponseTimeout)
	def(&l.RepeatInterval, DefaultRepeatInterval)
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if l.Recent <= 0 {
		l.Recent = DefaultRecent
	}
	if l.MaxConns <= 0 {
		l.MaxConns = DefaultMaxConns
	}
	return l
}

// Gate decides, relays and logs the guest's outbound connections.
type Gate struct {
	policy   atomic.Pointer[policy]
	journal  *journal
	resolver Resolver
	dialer   Dialer
	decider  Decider
	askTO    time.Duration
	limits   Limits
	reqCred  bool
	logger   *slog.Logger
	now      func() time.Time
	asks     asker

	ca      *CA
	roots   *x509.CertPool
	secrets atomic.Pointer[secretSet]
	inspect atomic.Bool

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	guestConns atomic.Int64

	mu        sync.Mutex
	closed    bool
	listeners map[net.Listener]struct{}
	conns     map[net.Conn]struct{}
	byUser    map[string]credential // user -> credential
	byTask    map[string]string     // task -> user
}

type credential struct{ task, pass string }

// New parses the policy and opens the decision log. A parse error joins one
// error per malformed entry, each naming it (errors.Is ErrInvalidEntry).
func New(cfg Config) (*Gate, error) {
	p, err := newPolicy(cfg.Allow, cfg.Deny, cfg.MapHosts)
	if err != nil {
		return nil, fmt.Errorf("egress: policy: %w", err)
	}
	g := &Gate{
		resolver:  cfg.Resolver,
		dialer:    cfg.Dialer,
		decider:   cfg.Decider,
		askTO:     cfg.AskTimeout,
		limits:    cfg.Limits.withDefaults(),
		reqCred:   cfg.RequireCredential,
		logger:    cfg.Logger,
		now:       cfg.Now,
		listeners: map[net.Listener]struct{}{},
		conns:     map[net.Conn]struct{}{},
		byUser:    map[string]credential{},
		byTask:    map[string]string{},
	}
	g.ca, g.roots = cfg.CA, cfg.UpstreamRoots
	if err := g.SetSecrets(cfg.Secrets); err != nil {
		return nil, err
	}
	g.inspect.Store(cfg.Inspect)
	if cfg.UpstreamProxy != "" {
		if g.dialer == nil {
			g.dialer = &net.Dialer{}
		}
		pd, err := newProxyDialer(cfg.UpstreamProxy, g.dialer, g.limits.MaxHeaderBytes)
		if err != nil {
			return nil, err
		}
		g.dialer = pd
	}
	if g.resolver == nil {
		g.resolver = net.DefaultResolver
	}
	if g.dialer == nil {
		g.dialer = &net.Dialer{}
	}
	if g.askTO <= 0 {
		g.askTO = DefaultAskTimeout
	}
	if g.logger == nil {
		g.logger = slog.New(slog.DiscardHandler)
	}
	if g.now == nil {
		g.now = time.Now
	}
	if g.journal, err = newJournal(cfg.LogFile, cfg.LogMaxBytes, g.limits.Recent, g.limits.RepeatInterval, g.logger); err != nil {
		return nil, err
	}
	g.policy.Store(p)
	g.ctx, g.cancel = context.WithCancel(context.Background())
	g.asks.calls = map[string]*askCall{}
	return g, nil
}

// SetPolicy replaces the allow, deny and map-host lists, for connections
// decided from now on (open connections keep the decision they had). On a
// parse error nothing changes. Entries a Decider added with allow-always are
// kept.
func (g *Gate) SetPolicy(allow, deny, mapHosts []string) error {
	p, err := newPolicy(allow, deny, mapHosts)
	if err != nil {
		return fmt.Errorf("egress: policy: %w", err)
	}
	old := g.policy.Load()
	old.mu.RLock()
	p.session = append([]Entry(nil), old.session...)
	old.mu.RUnlock()
	g.policy.Store(p)
	return nil
}

// SetSecrets replaces the secrets, for requests from now on. On an error
// (each secret's problem joined, names only) nothing changes.
func (g *Gate) SetSecrets(secrets []Secret) error {
	set, err := newSecretSet(secrets)
	if err != nil {
		return fmt.Errorf("egress: secrets: %w", err)
	}
	if len(set.list) > 0 && g.ca == nil {
		return errors.New("egress: secrets need a CA (Config.CA) to terminate TLS")
	}
	g.secrets.Store(set)
	return nil
}

// SetInspect turns TLS inspection of every host on or off (it needs a CA).
func (g *Gate) SetInspect(on bool) { g.inspect.Store(on && g.ca != nil) }

// ServeHTTPProxy serves the HTTP proxy protocol (CONNECT and absolute-URI
// requests) on l until Close, which it returns ErrClosed after. l is closed
// on return.
func (g *Gate) ServeHTTPProxy(l net.Listener) error { return g.serve(l, ProtoHTTP, g.handleHTTP) }

// ServeSOCKS serves SOCKS5 on l until Close, which it returns ErrClosed
// after. l is closed on return.
func (g *Gate) ServeSOCKS(l net.Listener) error { return g.serve(l, ProtoSOCKS, g.handleSOCKS) }

func (g *Gate) serve(l net.Listener, proto Protocol, handle func(net.Conn)) error {
	if !g.track(l, nil) {
		l.Close()
		return ErrClosed
	}
	defer g.untrack(l, nil)
	var delay time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			if g.ctx.Err() != nil {
				return ErrClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				g.logger.Warn("egress: accept", "err", err, "retry", delay)
				time.Sleep(delay)
				continue
			}
			return fmt.Errorf("egress: accept: %w", err)
		}
		delay = 0
		if !g.track(nil, c) {
			c.Close()
			return ErrClosed
		}
		if g.guestConns.Add(1) > int64(g.limits.MaxConns) {
			g.guestConns.Add(-1)
			g.untrack(nil, c)
			g.record(Decision{Time: g.now(), Protocol: proto, Reason: ReasonTooManyConns,
				Detail: fmt.Sprintf("more than %d connections at once", g.limits.MaxConns)})
			continue
		}
		g.wg.Go(func() {
			defer g.guestConns.Add(-1)
			defer g.untrack(nil, c)
			// The guest's forwarder frames its streams, so that a
			// half-close crosses every transport the same way; a plain
			// stream (a TCP client) passes through unchanged.
			handle(egresswire.Server(c))
		})
	}
}

// track registers a listener or connection so Close can end it; false
// after Close.
func (g *Gate) track(l net.Listener, c net.Conn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	if l != nil {
		g.listeners[l] = struct{}{}
		g.wg.Add(1)
	}
	if c != nil {
		g.conns[c] = struct{}{}
	}
	return true
}

func (g *Gate) untrack(l net.Listener, c net.Conn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if l != nil {
		if _, ok := g.listeners[l]; ok {
			delete(g.listeners, l)
			l.Close()
		}
		g.wg.Done()
	}
	if c != nil {
		delete(g.conns, c)
		c.Close()
	}
}

// Close stops the listeners, ends every connection and pending question,
// waits for them, and closes the decision log and subscriptions.
func (g *Gate) Close() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	g.cancel()
	for l := range g.listeners {
		delete(g.listeners, l)
		l.Close()
	}
	for c := range g.conns {
		c.Close()
	}
	g.mu.Unlock()
	g.wg.Wait()
	return g.journal.close()
}

// Credentials returns the proxy credential of a task, creating it on first
// use: put it in the task's proxy URL (http://USER:PASS@127.0.0.1:3128).
// Both parts are URL-safe.
func (g *Gate) Credentials(task string) (user, pass string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if u, ok := g.byTask[task]; ok {
		return u, g.byUser[u].pass
	}
	user, pass = "t"+randomHex(8), randomHex(16)
	g.byTask[task] = user
	g.byUser[user] = credential{task: task, pass: pass}
	return user, pass
}

// Revoke forgets a task's credential: later connections using it are
// refused with auth-failed. Established connections are not cut.
func (g *Gate) Revoke(task string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if u, ok := g.byTask[task]; ok {
		delete(g.byTask, task)
		delete(g.byUser, u)
	}
}

// authenticate maps a credential to its task. present says whether one was
// given at all.
func (g *Gate) authenticate(user, pass string, present bool) (task string, ok bool) {
	if !present {
		return "", !g.reqCred
	}
	g.mu.Lock()
	c, found := g.byUser[user]
	g.mu.Unlock()
	if !found {
		subtle.ConstantTimeCompare([]byte(pass), []byte(pass)) // same work either way
		return "", false
	}
	if subtle.ConstantTimeCompare([]byte(pass), []byte(c.pass)) != 1 {
		return "", false
	}
	return c.task, true
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b) // never fails (crypto/rand since Go 1.24)
	return hex.EncodeToString(b)
}

// Subscribe streams decisions as they are recorded until ctx ends or the
// gate closes, then closes the channel. A subscriber that does not keep up
// misses decisions (Seq jumps) instead of slowing the gate.
func (g *Gate) Subscribe(ctx context.Context) <-chan Decision {
	g.mu.Lock()
	closed := g.closed
	if !closed {
		g.wg.Add(1) // held until the subscription is set up
	}
	g.mu.Unlock()
	if closed {
		ch := make(chan Decision)
		close(ch)
		return ch
	}
	defer g.wg.Done()
	return g.journal.subscribe(ctx, g.ctx.Done(), &g.wg)
}

// Recent returns the last decisions kept in memory, oldest first. Repeated
// identical refusals appear as one Decision and then summaries (see
// Decision.Repeated).
func (g *Gate) Recent() []Decision { return g.journal.recent() }

// record completes and records a decision.
func (g *Gate) record(d Decision) {
	if d.Reason.allowed() {
		d.Action = ActionAllow
	} else {
		d.Action = ActionDeny
	}
	d.Duration = g.now().Sub(d.Time)
	if d = g.journal.record(d); d.Seq == 0 {
		return // a repeat, counted
	}
	g.logger.Debug("egress: decision", "task", d.Task, "protocol", d.Protocol, "host", d.Host,
		"port", d.Port, "addr", d.Addr, "decision", d.Action, "reason", d.Reason, "rule", d.Rule)
}
