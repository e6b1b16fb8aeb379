package egress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock/app/egress/intercept"
	"github.com/airlock-sandbox/airlock/app/egress/policy"
	"github.com/airlock-sandbox/airlock/guest/api/egresswire"
)

// Gate decides, relays and logs the guest's outbound connections.
type Gate struct {
	policy   atomic.Pointer[policy.Policy]
	journal  *journal
	resolver Resolver
	dialer   Dialer
	asks     asker
	limits   Limits
	creds    *credentials
	tls      *inspection
	logger   *slog.Logger
	now      func() time.Time
	service  bool // refusals suggest `airlock egress`, not run's flags

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	live   *tracker
}

// New parses the policy and opens the decision log. A parse error joins one
// error per malformed entry, each naming it (errors.Is
// policy.ErrInvalidEntry).
func New(cfg Config) (*Gate, error) {
	p, err := policy.New(cfg.Allow, cfg.Deny, cfg.MapHosts)
	if err != nil {
		return nil, err
	}
	g := &Gate{
		resolver: cfg.Resolver,
		dialer:   cfg.Dialer,
		asks:     asker{decider: cfg.Decider, timeout: cfg.AskTimeout, calls: map[string]*askCall{}},
		limits:   cfg.Limits.withDefaults(),
		creds:    newCredentials(cfg.RequireCredential),
		tls:      &inspection{ca: cfg.CA, roots: cfg.UpstreamRoots},
		logger:   cfg.Logger,
		now:      cfg.Now,
		service:  cfg.Service,
		live:     newTracker(),
	}
	if err := g.SetSecrets(cfg.Secrets); err != nil {
		return nil, err
	}
	g.tls.inspect.Store(cfg.Inspect)
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
	if g.asks.timeout <= 0 {
		g.asks.timeout = DefaultAskTimeout
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
	return g, nil
}

// SetPolicy replaces the allow, deny and map-host lists, for connections
// decided from now on (open connections keep the decision they had). On a
// parse error nothing changes. Entries a Decider added with allow-always are
// kept.
func (g *Gate) SetPolicy(allow, deny, mapHosts []string) error {
	p, err := policy.New(allow, deny, mapHosts)
	if err != nil {
		return err
	}
	p.KeepSession(g.policy.Load())
	g.policy.Store(p)
	return nil
}

// SetSecrets replaces the secrets, for requests from now on. On an error
// (each secret's problem joined, names only) nothing changes.
func (g *Gate) SetSecrets(secrets []intercept.Secret) error {
	set, err := intercept.NewSecrets(secrets)
	if err != nil {
		return fmt.Errorf("egress: secrets: %w", err)
	}
	if set.Len() > 0 && g.tls.ca == nil {
		return errors.New("egress: secrets need a CA (Config.CA) to terminate TLS")
	}
	g.tls.secrets.Store(set)
	return nil
}

// SetInspect turns TLS inspection of every host on or off (it needs a CA).
func (g *Gate) SetInspect(on bool) { g.tls.inspect.Store(on && g.tls.ca != nil) }

// ServeHTTPProxy serves the HTTP proxy protocol (CONNECT and absolute-URI
// requests) on l until Close, which it returns ErrClosed after. l is closed
// on return.
func (g *Gate) ServeHTTPProxy(l net.Listener) error { return g.serve(l, ProtoHTTP, g.handleHTTP) }

// ServeSOCKS serves SOCKS5 on l until Close, which it returns ErrClosed
// after. l is closed on return.
func (g *Gate) ServeSOCKS(l net.Listener) error { return g.serve(l, ProtoSOCKS, g.handleSOCKS) }

func (g *Gate) serve(l net.Listener, proto Protocol, handle func(net.Conn)) error {
	if !g.live.track(l, nil) {
		l.Close()
		return ErrClosed
	}
	defer g.live.untrack(l, nil)
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
		if !g.live.track(nil, c) {
			c.Close()
			return ErrClosed
		}
		if g.live.guests.Add(1) > int64(g.limits.MaxConns) {
			g.live.guests.Add(-1)
			g.live.untrack(nil, c)
			g.record(Decision{Time: g.now(), Protocol: proto, Reason: ReasonTooManyConns,
				Detail: fmt.Sprintf("more than %d connections at once", g.limits.MaxConns)})
			continue
		}
		g.live.wg.Go(func() {
			defer g.live.guests.Add(-1)
			defer g.live.untrack(nil, c)
			// The guest's forwarder frames its streams, so that a
			// half-close crosses every transport the same way; a plain
			// stream (a TCP client) passes through unchanged.
			handle(egresswire.Server(c))
		})
	}
}

// Close stops the listeners, ends every connection and pending question,
// waits for them, and closes the decision log and subscriptions.
func (g *Gate) Close() error {
	if !g.live.close(g.cancel) {
		return nil
	}
	g.live.wg.Wait()
	return g.journal.close()
}

// Subscribe streams decisions as they are recorded until ctx ends or the
// gate closes, then closes the channel. A subscriber that does not keep up
// misses decisions (Seq jumps) instead of slowing the gate.
func (g *Gate) Subscribe(ctx context.Context) <-chan Decision {
	if !g.live.hold() { // held until the subscription is set up
		ch := make(chan Decision)
		close(ch)
		return ch
	}
	defer g.live.wg.Done()
	return g.journal.subscribe(ctx, g.ctx.Done(), &g.live.wg)
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
