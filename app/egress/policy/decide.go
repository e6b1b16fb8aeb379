package policy

import (
	"fmt"
	"net/netip"
)

// Outcome is what the policy says about a target.
type Outcome int

// The outcomes. Allowed lets bytes flow; Unmatched leaves the answer to
// the gate's Decider; the others refuse.
const (
	// Unmatched: no rule decides the target. The gate asks its Decider
	// (see Asked), or refuses with no-matching-rule.
	Unmatched Outcome = iota
	// Allowed: an allow entry matched, or the Decider allowed the target.
	Allowed
	// Denied: a deny entry matched the name, address or port.
	Denied
	// Private: the target is, is pinned to, or resolved to a loopback,
	// private, link-local or otherwise special address no entry opens.
	Private
	// Metadata: the same for a cloud metadata address.
	Metadata
)

// Plan is the policy's answer for one target. Match makes it from the
// rules; once the addresses are known (the map-host pins, or the name's
// resolved addresses) Check completes it. The addresses in an Allowed plan
// after Check are the only ones that may be dialled: there is no second
// lookup.
type Plan struct {
	// Outcome is the answer.
	Outcome Outcome
	// Rule is the entry that matched, in canonical form ("map-host
	// NAME=ADDR", "ask:allow-once" …), if any.
	Rule string
	// Detail explains a refusal.
	Detail string
	// Addr is the refused address, for the log.
	Addr netip.Addr
	// Addrs are the checked addresses, in dial order. Match sets them for
	// an allowed IP literal; Check for a name.
	Addrs []netip.Addr
	// Pins are the map-host pins of the name: Check is given these
	// instead of the name's resolved addresses. nil means resolve it.
	Pins []netip.Addr

	// pinExempt: a configured allow entry matched the name and port, so
	// its pinned special addresses may be dialled.
	pinExempt bool
}

// Match applies the rules to t before any address is known: deny entries,
// then special addresses (for IP literals), then allow entries.
//
// A pin says where a name goes, not whether or on which ports it may be
// reached: the allow entries decide that as for any name. A pinned special
// address (loopback, private …) is exempt from the special-address refusal
// only when a configured allow entry matches the name and port; answers of
// the Decider, and the session entries they add, never open it, so a pin to
// such an address with no matching entry is refused without asking.
func (p *Policy) Match(t Target) Plan {
	if e, ok := p.denied(t); ok {
		return Plan{Outcome: Denied, Rule: e.String(), Detail: "denied by rule " + e.String()}
	}
	if t.Addr.IsValid() {
		if block, class, special := classify(t.Addr); special {
			e, ok := p.exempt(t.Addr, t.Port, block)
			if !ok {
				return refusal(t.Addr, class)
			}
			return Plan{Outcome: Allowed, Rule: e.String(), Addrs: []netip.Addr{t.Addr}}
		}
	}
	pins := p.pins[t.Host] // nil for IP literals
	pinRule := pinRule(t, pins)
	e, session, matched := p.allowed(t)
	switch {
	case matched:
		out := Plan{Outcome: Allowed, Rule: e.String(), Pins: pins, pinExempt: pins != nil && !session}
		if session {
			out.Rule += " (session)"
		}
		if pinRule != "" {
			out.Rule += ", " + pinRule
		}
		if t.Addr.IsValid() {
			out.Addrs = []netip.Addr{t.Addr}
		}
		return out
	case pins != nil && !p.pinsOpen(pins, t.Port):
		a := pins[0]
		_, class, _ := classify(a)
		r := refusal(a, class)
		r.Rule = pinRule
		r.Detail = fmt.Sprintf("%s is pinned to %s address %s and no allow rule names %s (a map-host pin says where a name goes, not which ports are open)",
			t.Host, class, a, t)
		return r
	}
	return Plan{Outcome: Unmatched, Rule: pinRule, Detail: "no allow rule matches " + t.String(), Pins: pins}
}

// Asked turns the Unmatched plan m into an Allowed one after the Decider
// allowed t, with rule naming the answer. always adds t's host (or
// address) and port to the session's allow list. An answer never opens a
// special address, pinned or resolved.
func (p *Policy) Asked(t Target, m Plan, rule string, always bool) Plan {
	if always {
		p.addSession(sessionEntry(t))
	}
	out := Plan{Outcome: Allowed, Rule: rule, Pins: m.Pins}
	if t.Addr.IsValid() {
		out.Addrs = []netip.Addr{t.Addr}
	}
	return out
}

// Check completes the Allowed plan m for the name t with its addresses
// (m.Pins, or the resolved ones): each is checked against the deny
// entries and the special ranges. The plan keeps the addresses that pass,
// in order; when none does, it is the refusal of the first.
func (p *Policy) Check(t Target, m Plan, addrs []netip.Addr) Plan {
	out := m
	out.Addrs = nil
	var first *Plan
	for _, a := range addrs {
		a = a.Unmap().WithZone("")
		if e, ok := p.deniedAddr(a, t.Port); ok {
			if first == nil {
				first = &Plan{Outcome: Denied, Rule: e.String(), Addr: a,
					Detail: fmt.Sprintf("%s resolved to %s, denied by rule %s", t.Host, a, e)}
			}
			continue
		}
		if block, class, special := classify(a); special && !m.pinExempt {
			if _, ok := p.exempt(a, t.Port, block); !ok {
				if first == nil {
					r := refusal(a, class)
					if m.Pins != nil {
						r.Rule = pinRule(t, m.Pins)
						r.Detail = fmt.Sprintf("%s is pinned to %s; only a configured allow rule for %s opens it, not an answer when asked", t.Host, r.Detail, t)
					} else {
						r.Detail = t.Host + " resolved to " + r.Detail
					}
					first = &r
				}
				continue
			}
		}
		out.Addrs = append(out.Addrs, a)
	}
	if len(out.Addrs) == 0 && first != nil {
		return *first
	}
	return out
}

// pinRule names the map-host pin of t, or "" without one.
func pinRule(t Target, pins []netip.Addr) string {
	if pins == nil {
		return ""
	}
	return "map-host " + t.Host + "=" + pins[0].String()
}

// refusal is the plan for a special address nobody allowed.
func refusal(a netip.Addr, class addrClass) Plan {
	o := Private
	if class == "metadata" {
		o = Metadata
	}
	return Plan{Outcome: o, Addr: a, Detail: fmt.Sprintf("%s address %s", class, a)}
}

// sessionEntry is the allow entry an allow-always answer adds: this host
// (or address) on this port only.
func sessionEntry(t Target) Entry {
	if t.Addr.IsValid() {
		return Entry{Kind: KindPrefix, Prefix: netip.PrefixFrom(t.Addr, t.Addr.BitLen()), Port: t.Port}
	}
	return Entry{Kind: KindName, Name: t.Host, Port: t.Port}
}
