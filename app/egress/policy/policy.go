package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"sync"
)

// Policy is the session's rule set. The configured lists are immutable;
// session holds entries added by an allow-always answer from the Decider.
type Policy struct {
	allow, deny []Entry
	pins        map[string][]netip.Addr

	mu      sync.RWMutex
	session []Entry
}

// New parses the allow, deny and map-host lists, returning every error joined.
func New(allow, deny, mapHosts []string) (*Policy, error) {
	p := &Policy{pins: map[string][]netip.Addr{}}
	var errs []error
	for _, s := range allow {
		e, err := ParseAllowEntry(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("allow: %w", err))
			continue
		}
		p.allow = append(p.allow, e)
	}
	for _, s := range deny {
		e, err := ParseEntry(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("deny: %w", err))
			continue
		}
		p.deny = append(p.deny, e)
	}
	for _, s := range mapHosts {
		m, err := ParseMapHost(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("map-host: %w", err))
			continue
		}
		p.pins[m.Name] = append(p.pins[m.Name], m.Addr)
	}
	return p, errors.Join(errs...)
}

// denied returns the first deny entry matching the target.
func (p *Policy) denied(t Target) (Entry, bool) {
	for _, e := range p.deny {
		if t.Matches(e) {
			return e, true
		}
	}
	return Entry{}, false
}

// deniedAddr returns the first deny entry matching a resolved address.
func (p *Policy) deniedAddr(a netip.Addr, port uint16) (Entry, bool) {
	for _, e := range p.deny {
		if e.matchAddr(a, port) {
			return e, true
		}
	}
	return Entry{}, false
}

// allowed returns the first configured or session allow entry matching the
// target; session reports which list it came from.
func (p *Policy) allowed(t Target) (e Entry, session, ok bool) {
	for _, e := range p.allow {
		if t.Matches(e) {
			return e, false, true
		}
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	for _, e := range p.session {
		if t.Matches(e) {
			return e, true, true
		}
	}
	return Entry{}, false, false
}

// addSession adds an allow-always answer.
func (p *Policy) addSession(e Entry) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, have := range p.session {
		if have == e {
			return
		}
	}
	p.session = append(p.session, e)
}

// exempt returns a configured allow entry that lifts the refusal of a
// special address a in block: an IP or CIDR entry inside block (so at least
// as specific as the block itself) containing a on this port. An allow of
// 0.0.0.0/0 therefore does not open loopback, and only an exact entry opens
// a metadata address. Session (ask) entries never exempt.
func (p *Policy) exempt(a netip.Addr, port uint16, block netip.Prefix) (Entry, bool) {
	for _, e := range p.allow {
		if e.matchAddr(a, port) && e.Prefix.Bits() >= block.Bits() && block.Contains(e.Prefix.Addr()) {
			return e, true
		}
	}
	return Entry{}, false
}

// pinsOpen reports whether any pinned address could be dialled for port
// without a configured allow entry for the name: it is not special, or an
// IP or CIDR entry exempts it.
func (p *Policy) pinsOpen(pins []netip.Addr, port uint16) bool {
	for _, a := range pins {
		block, _, special := classify(a)
		if !special {
			return true
		}
		if _, ok := p.exempt(a, port, block); ok {
			return true
		}
	}
	return false
}

// Target is what a request asks to reach: a normalised name or an IP
// literal, and a port. NewTarget makes one.
type Target struct {
	// Host is the normalised name, or the canonical address text.
	Host string
	// Addr is the address of an IP literal; the zero Addr for a name.
	Addr netip.Addr
	// Port is the requested port, never 0.
	Port uint16
}

// NewTarget normalises a requested host and port.
func NewTarget(host string, port uint16) (Target, error) {
	if port == 0 {
		return Target{}, errors.New("port 0")
	}
	if a, ok, err := parseIPHost(host); err != nil {
		return Target{}, err
	} else if ok {
		return Target{Host: a.String(), Addr: a, Port: port}, nil
	}
	n, err := normalizeName(host)
	if err != nil {
		return Target{}, err
	}
	return Target{Host: n, Port: port}, nil
}

// Matches applies an entry: names match name and wildcard entries only, IP
// literals match IP and CIDR entries only.
func (t Target) Matches(e Entry) bool {
	if t.Addr.IsValid() {
		return e.matchAddr(t.Addr, t.Port)
	}
	return e.matchName(t.Host, t.Port)
}

// String returns host:port, bracketing IPv6.
func (t Target) String() string {
	if t.Addr.Is6() {
		return "[" + t.Host + "]:" + strconv.Itoa(int(t.Port))
	}
	return t.Host + ":" + strconv.Itoa(int(t.Port))
}

// KeepSession copies the entries allow-always answers added to old into p,
// so that replacing the configured lists keeps them.
func (p *Policy) KeepSession(old *Policy) {
	old.mu.RLock()
	s := append([]Entry(nil), old.session...)
	old.mu.RUnlock()
	p.mu.Lock()
	p.session = s
	p.mu.Unlock()
}
