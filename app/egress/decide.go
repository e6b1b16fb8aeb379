package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"sync"
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
// must return by the context's deadline; an error denies.
type Decider interface {
	Decide(ctx context.Context, req Request) (Verdict, error)
}

// asker coalesces identical open questions so that a client opening six
// connections at once asks once.
type asker struct {
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
		g.wg.Go(func() {
			// The question belongs to the gate, not to the first client:
			// its deadline runs even if that client goes away.
			actx, cancel := context.WithTimeout(g.ctx, g.askTO)
			defer cancel()
			c.verdict, c.err = g.decider.Decide(actx, req)
			switch {
			case g.ctx.Err() != nil:
				c.reason = ReasonShutdown
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

// decide applies the policy to a target: deny entries, then allow entries
// (or the Decider), then the addresses: a map-host pin's, or the name's
// resolved ones, each checked. The addresses in the returned plan are the
// only ones that may be dialled: there is no second lookup.
//
// A pin says where a name goes, not whether or on which ports it may be
// reached: the allow entries decide that as for any name. A pinned special
// address (loopback, private …) is exempt from the special-address refusal
// only when a configured allow entry matches the name and port; answers of
// the Decider, and the session entries they add, never open it, so a pin to
// such an address with no matching entry is refused without asking.
func (g *Gate) decide(ctx context.Context, task string, proto Protocol, t target) plan {
	p := g.policy.Load()
	if e, ok := p.denied(t); ok {
		return plan{reason: ReasonDeniedByRule, rule: e.String(), detail: "denied by rule " + e.String()}
	}
	if t.addr.IsValid() {
		if block, class, special := classify(t.addr); special {
			e, ok := p.exempt(t.addr, t.port, block)
			if !ok {
				return refusal(t.addr, class)
			}
			return plan{reason: ReasonAllowedByRule, rule: e.String(), addrs: []netip.Addr{t.addr}}
		}
	}
	pins := p.pins[t.host] // nil for IP literals
	pinRule := ""
	if pins != nil {
		pinRule = "map-host " + t.host + "=" + pins[0].String()
	}
	var out plan
	e, session, matched := p.allowed(t)
	switch {
	case matched:
		out = plan{reason: ReasonAllowedByRule, rule: e.String()}
		if session {
			out.rule += " (session)"
		}
		if pinRule != "" {
			out.rule += ", " + pinRule
		}
	case pins != nil && !p.pinsOpen(pins, t.port):
		a := pins[0]
		_, class, _ := classify(a)
		r := refusal(a, class)
		r.rule = pinRule
		r.detail = fmt.Sprintf("%s is pinned to %s address %s and no allow rule names %s (a map-host pin says where a name goes, not which ports are open)",
			t.host, class, a, t)
		return r
	case g.decider == nil:
		return plan{reason: ReasonNoMatchingRule, rule: pinRule, detail: "no allow rule matches " + t.String()}
	default:
		v, reason, err := g.ask(ctx, Request{Task: task, Protocol: proto, Host: t.host, Port: t.port})
		switch {
		case reason != "":
			return plan{reason: reason, detail: fmt.Sprintf("asking about %s: %v", t, err)}
		case v == AllowOnce || v == AllowAlways:
			out = plan{reason: ReasonAllowedByAsk, rule: "ask:" + v.String()}
			if v == AllowAlways {
				p.addSession(sessionEntry(t))
			}
		default:
			return plan{reason: ReasonAskDenied, rule: "ask:deny", detail: "denied when asked"}
		}
	}
	if t.addr.IsValid() {
		out.addrs = []netip.Addr{t.addr}
		return out
	}
	// A pinned special address is open for this name and port only when a
	// configured entry allowed them.
	pinExempt := pins != nil && matched && !session
	addrs := pins
	if addrs == nil {
		rctx, cancel := context.WithTimeout(ctx, g.limits.ResolveTimeout)
		var err error
		addrs, err = g.resolver.LookupNetIP(rctx, "ip", t.host)
		cancel()
		if err != nil || len(addrs) == 0 {
			return plan{reason: ReasonResolveFailed, rule: out.rule, detail: fmt.Sprintf("resolve %s: %v", t.host, err)}
		}
	}
	var first *plan
	for _, a := range addrs {
		a = a.Unmap().WithZone("")
		if e, ok := p.deniedAddr(a, t.port); ok {
			if first == nil {
				first = &plan{reason: ReasonDeniedByRule, rule: e.String(), addr: a,
					detail: fmt.Sprintf("%s resolved to %s, denied by rule %s", t.host, a, e)}
			}
			continue
		}
		if block, class, special := classify(a); special && !pinExempt {
			if _, ok := p.exempt(a, t.port, block); !ok {
				if first == nil {
					r := refusal(a, class)
					if pins != nil {
						r.rule = pinRule
						r.detail = fmt.Sprintf("%s is pinned to %s; only a configured allow rule for %s opens it, not an answer when asked", t.host, r.detail, t)
					} else {
						r.detail = t.host + " resolved to " + r.detail
					}
					first = &r
				}
				continue
			}
		}
		out.addrs = append(out.addrs, a)
	}
	if len(out.addrs) == 0 {
		return *first
	}
	return out
}

// refusal is the plan for a special address nobody allowed.
func refusal(a netip.Addr, class addrClass) plan {
	r := ReasonPrivateAddress
	if class == "metadata" {
		r = ReasonMetadataAddress
	}
	return plan{reason: r, addr: a, detail: fmt.Sprintf("%s address %s", class, a)}
}

// sessionEntry is the allow entry an allow-always answer adds: this host
// (or address) on this port only.
func sessionEntry(t target) Entry {
	if t.addr.IsValid() {
		return Entry{Kind: KindPrefix, Prefix: netip.PrefixFrom(t.addr, t.addr.BitLen()), Port: t.port}
	}
	return Entry{Kind: KindName, Name: t.host, Port: t.port}
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
