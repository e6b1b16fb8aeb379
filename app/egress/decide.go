package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/app/egress/policy"
)

// Verdict is a Decider's answer.
type Verdict int

// The verdicts. The zero Verdict denies.
const (
	// Deny refuses this connection (reason ask-denied).
	Deny Verdict = iota
	// AllowOnce allows this connection, and the others asked about the
	// same task, host and port while the question was open.
	AllowOnce
	// AllowAlways allows it and adds host:port to the session's allow list.
	AllowAlways
)

// String returns deny, allow-once or allow-always.
func (v Verdict) String() string {
	switch v {
	case AllowOnce:
		return "allow-once"
	case AllowAlways:
		return "allow-always"
	}
	return "deny"
}

// Request is what a Decider is asked about.
type Request struct {
	// Task is the task that asked ("" without a credential).
	Task string
	// Protocol is http, connect or socks.
	Protocol Protocol
	// Host is the normalised name or IP literal.
	Host string
	// Port is the target port.
	Port uint16
}

// Decider answers for connections no rule matches: the service asks the
// user through the UIs attached to it (app/service's askDecider). Decide
// must return by the context's deadline; an error denies. ErrNobodyToAsk
// says no one could be asked: the refusal then says so, not that the user
// denied it.
type Decider interface {
	Decide(ctx context.Context, req Request) (Verdict, error)
}

// ErrNobodyToAsk is a Decider's error when no window is open to ask the
// user (or the last one closed while the question waited).
var ErrNobodyToAsk = errors.New("no window to ask")

// asker coalesces identical open questions so that a client opening six
// connections at once asks once.
type asker struct {
	decider Decider       // nil: refuse what no rule matches
	timeout time.Duration // bounds one Decide call

	mu    sync.Mutex
	calls map[string]*askCall
}

type askCall struct {
	done    chan struct{}
	verdict Verdict
	reason  Reason // set when the question itself failed
	err     error
}

// maxOpenAsks bounds the questions the gate has open at once. A question
// outlives the connection that raised it, so without a bound a guest
// closing connections to ever new hosts would queue questions without end.
const maxOpenAsks = 1024

// ask returns the Decider's verdict for req, or the reason the question
// failed (ask-timeout, ask-failed, shutdown).
func (g *Gate) ask(ctx context.Context, req Request) (Verdict, Reason, error) {
	key := req.Task + "\x00" + req.Host + "\x00" + strconv.Itoa(int(req.Port))
	g.asks.mu.Lock()
	c, ok := g.asks.calls[key]
	if !ok && len(g.asks.calls) >= maxOpenAsks {
		g.asks.mu.Unlock()
		return Deny, ReasonAskFailed, fmt.Errorf("%d questions are open already: answer them first", maxOpenAsks)
	}
	if !ok {
		c = &askCall{done: make(chan struct{})}
		g.asks.calls[key] = c
		g.live.wg.Go(func() {
			// The question belongs to the gate, not to the first client:
			// its deadline runs even if that client goes away.
			actx, cancel := context.WithTimeout(g.ctx, g.asks.timeout)
			defer cancel()
			c.verdict, c.err = g.asks.decider.Decide(actx, req)
			switch {
			case g.ctx.Err() != nil:
				c.reason = ReasonShutdown
			case errors.Is(c.err, ErrNobodyToAsk):
				c.reason = ReasonNoMatchingRule
			case c.err != nil && (errors.Is(c.err, context.DeadlineExceeded) || actx.Err() != nil):
				c.reason = ReasonAskTimeout
			case c.err != nil:
				c.reason = ReasonAskFailed
			case actx.Err() != nil:
				c.reason, c.err = ReasonAskTimeout, actx.Err() // answered too late
			}
			g.asks.mu.Lock()
			delete(g.asks.calls, key)
			g.asks.mu.Unlock()
			close(c.done)
		})
	}
	g.asks.mu.Unlock()
	select {
	case <-c.done:
		return c.verdict, c.reason, c.err
	case <-ctx.Done():
		return Deny, ReasonShutdown, ctx.Err()
	}
}

// plan is the result of deciding a target: either a refusal reason, or
// the checked addresses to dial.
type plan struct {
	reason Reason
	rule   string
	detail string
	addr   netip.Addr   // the refused address, for the log
	addrs  []netip.Addr // checked, in dial order
}

// decide applies the policy to a target (policy.Policy.Match), asks the
// Decider when no rule matches, then checks the addresses: a map-host
// pin's, or the name's resolved ones (policy.Policy.Check). The addresses
// in the returned plan are the only ones that may be dialled: there is no
// second lookup.
func (g *Gate) decide(ctx context.Context, task string, proto Protocol, t policy.Target) plan {
	p := g.policy.Load()
	m := p.Match(t)
	reason := ReasonAllowedByRule
	switch m.Outcome {
	case policy.Allowed:
	case policy.Unmatched:
		if g.asks.decider == nil {
			return plan{reason: ReasonNoMatchingRule, rule: m.Rule, detail: m.Detail}
		}
		v, r, err := g.ask(ctx, Request{Task: task, Protocol: proto, Host: t.Host, Port: t.Port})
		switch {
		case errors.Is(err, ErrNobodyToAsk):
			detail := "denied (no window to ask)"
			if m.Detail != "" {
				detail = m.Detail + "; " + detail
			}
			return plan{reason: ReasonNoMatchingRule, rule: m.Rule, detail: detail}
		case r != "":
			return plan{reason: r, detail: fmt.Sprintf("asking about %s: %v", t, err)}
		case v == AllowOnce || v == AllowAlways:
			m = p.Asked(t, m, "ask:"+v.String(), v == AllowAlways)
			reason = ReasonAllowedByAsk
		default:
			return plan{reason: ReasonAskDenied, rule: "ask:deny", detail: "denied when asked"}
		}
	default:
		return refused(m)
	}
	if t.Addr.IsValid() {
		return plan{reason: reason, rule: m.Rule, addrs: m.Addrs}
	}
	addrs := m.Pins
	if addrs == nil {
		rctx, cancel := context.WithTimeout(ctx, g.limits.ResolveTimeout)
		var err error
		addrs, err = g.resolver.LookupNetIP(rctx, "ip", t.Host)
		cancel()
		if err != nil || len(addrs) == 0 {
			return plan{reason: ReasonResolveFailed, rule: m.Rule, detail: fmt.Sprintf("resolve %s: %v", t.Host, err)}
		}
	}
	if m = p.Check(t, m, addrs); m.Outcome != policy.Allowed {
		return refused(m)
	}
	return plan{reason: reason, rule: m.Rule, addrs: m.Addrs}
}

// refused is the plan for a refusal of the policy.
func refused(m policy.Plan) plan {
	r := ReasonDeniedByRule
	switch m.Outcome {
	case policy.Private:
		r = ReasonPrivateAddress
	case policy.Metadata:
		r = ReasonMetadataAddress
	}
	return plan{reason: r, rule: m.Rule, detail: m.Detail, addr: m.Addr}
}

// dial connects to the plan's addresses in order, each with the dial
// timeout, and returns the first connection and its address.
func (g *Gate) dial(ctx context.Context, pl plan, port uint16) (net.Conn, netip.Addr, error) {
	var errs []error
	for _, a := range pl.addrs {
		dctx, cancel := context.WithTimeout(ctx, g.limits.DialTimeout)
		c, err := g.dialer.DialContext(dctx, "tcp", netip.AddrPortFrom(a, port).String())
		cancel()
		if err == nil {
			return c, a, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	last := netip.Addr{}
	if len(pl.addrs) > 0 {
		last = pl.addrs[len(pl.addrs)-1]
	}
	return nil, last, fmt.Errorf("egress: dial: %w", errors.Join(errs...))
}
