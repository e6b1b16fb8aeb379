package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"sync"
)

// ErrInvalidEntry is wrapped by every error about a malformed allow, deny or
// map-host entry; the error text names the entry and the reason.
var ErrInvalidEntry = errors.New("invalid entry")

// EntryError describes one malformed entry.
type EntryError struct {
	// Entry is the text as given.
	Entry string
	// Reason says what is wrong with it.
	Reason string
}

// Error returns `"ENTRY": REASON`.
func (e *EntryError) Error() string { return fmt.Sprintf("%q: %s", e.Entry, e.Reason) }

// Is makes errors.Is(err, ErrInvalidEntry) true.
func (e *EntryError) Is(target error) bool { return target == ErrInvalidEntry }

// EntryKind says what an Entry matches.
type EntryKind int

// The kinds of entries.
const (
	// KindName matches one host name exactly.
	KindName EntryKind = iota + 1
	// KindWildcard (*.example.com) matches strict subdomains of Name.
	KindWildcard
	// KindPrefix matches IP addresses in Prefix (a single address is a /32
	// or /128 prefix).
	KindPrefix
)

// Entry is one parsed allow or deny rule.
type Entry struct {
	// Kind says which of Name or Prefix is set.
	Kind EntryKind
	// Name is the normalised host name (KindName) or domain (KindWildcard).
	Name string
	// Prefix is the address range (KindPrefix), IPv4 unmapped.
	Prefix netip.Prefix
	// Port restricts the entry to one port; 0 matches any port.
	Port uint16
}

// ParseEntry parses one allow or deny entry: `example.com`,
// `*.example.com`, `1.2.3.4`, `::1`, `10.0.0.0/8`, `fd00::/8`, each with an
// optional `:port` (`[::1]:443`, `[fd00::/8]:443` for IPv6). The error is an
// *EntryError naming s.
func ParseEntry(s string) (Entry, error) {
	e, reason := parseEntry(strings.TrimSpace(s))
	if reason != "" {
		return Entry{}, &EntryError{Entry: s, Reason: reason}
	}
	return e, nil
}

func parseEntry(s string) (Entry, string) {
	if s == "" {
		return Entry{}, "empty entry"
	}
	host, port, err := splitHostPort(s)
	if err != nil {
		return Entry{}, err.Error()
	}
	e := Entry{Port: port}
	if strings.Contains(host, "/") {
		p, err := netip.ParsePrefix(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
		if err != nil {
			return Entry{}, "invalid CIDR"
		}
		if p != p.Masked() {
			return Entry{}, fmt.Sprintf("host bits set in CIDR (did you mean %s?)", p.Masked())
		}
		if strings.HasPrefix(host, "[") && !p.Addr().Is6() {
			return Entry{}, "brackets hold an IPv6 address only"
		}
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		e.Kind, e.Prefix = KindPrefix, p
		return e, ""
	}
	if a, ok, err := parseIPHost(host); err != nil {
		return Entry{}, err.Error()
	} else if ok {
		e.Kind, e.Prefix = KindPrefix, netip.PrefixFrom(a, a.BitLen())
		return e, ""
	}
	name := host
	e.Kind = KindName
	if strings.HasPrefix(host, "*.") {
		name, e.Kind = host[2:], KindWildcard
		if name == "" || name == "." {
			return Entry{}, "empty domain"
		}
	}
	if strings.Contains(name, "*") {
		return Entry{}, "wildcard allowed only as the whole leftmost label (*.example.com)"
	}
	n, err := normalizeName(name)
	if err != nil {
		return Entry{}, err.Error()
	}
	e.Name = n
	return e, ""
}

// String returns the entry in canonical form; ParseEntry(e.String()) == e.
func (e Entry) String() string {
	var host string
	switch e.Kind {
	case KindName:
		host = e.Name
	case KindWildcard:
		host = "*." + e.Name
	case KindPrefix:
		if e.Prefix.IsSingleIP() {
			host = e.Prefix.Addr().String()
		} else {
			host = e.Prefix.String()
		}
		if e.Port != 0 && e.Prefix.Addr().Is6() {
			host = "[" + host + "]"
		}
	default:
		return "<invalid>"
	}
	if e.Port != 0 {
		host += ":" + strconv.Itoa(int(e.Port))
	}
	return host
}

// matchName reports whether the entry matches a normalised host name.
func (e Entry) matchName(name string, port uint16) bool {
	if e.Port != 0 && e.Port != port {
		return false
	}
	switch e.Kind {
	case KindName:
		return name == e.Name
	case KindWildcard:
		return len(name) > len(e.Name)+1 && strings.HasSuffix(name, e.Name) && name[len(name)-len(e.Name)-1] == '.'
	}
	return false
}

// matchAddr reports whether the entry matches an (unmapped) address.
func (e Entry) matchAddr(a netip.Addr, port uint16) bool {
	if e.Port != 0 && e.Port != port {
		return false
	}
	return e.Kind == KindPrefix && e.Prefix.Contains(a)
}

// MapHost is a parsed `NAME=ADDR` pin.
type MapHost struct {
	// Name is the normalised host name.
	Name string
	// Addr is the address connections to Name go to, IPv4 unmapped.
	Addr netip.Addr
}

// ParseMapHost parses `NAME=ADDR`: NAME a host name (no wildcard, no port),
// ADDR an IP literal (no port; `[v6]` accepted).
func ParseMapHost(s string) (MapHost, error) {
	fail := func(reason string) (MapHost, error) {
		return MapHost{}, &EntryError{Entry: s, Reason: reason}
	}
	name, addr, ok := strings.Cut(strings.TrimSpace(s), "=")
	if !ok {
		return fail("map-host needs NAME=ADDR")
	}
	name, addr = strings.TrimSpace(name), strings.TrimSpace(addr)
	if strings.Contains(name, "*") {
		return fail("map-host NAME cannot be a wildcard")
	}
	if _, ok, _ := parseIPHost(name); ok {
		return fail("map-host NAME must be a host name, not an address")
	}
	n, err := normalizeName(name)
	if err != nil {
		return fail("map-host NAME: " + err.Error())
	}
	a, ok, err := parseIPHost(addr)
	if err != nil {
		return fail("map-host ADDR: " + err.Error())
	}
	if !ok {
		return fail("map-host ADDR must be an IP address (no port, no name)")
	}
	return MapHost{Name: n, Addr: a}, nil
}

// policy is the session's rule set. The configured lists are immutable;
// session holds entries added by an allow-always answer from the Decider.
type policy struct {
	allow, deny []Entry
	pins        map[string][]netip.Addr

	mu      sync.RWMutex
	session []Entry
}

// ParseAllowEntry parses an entry for an allow list: ParseEntry, and a
// wildcard needs at least two labels (*.com would allow a whole top-level
// domain; it is fine in a deny list).
func ParseAllowEntry(s string) (Entry, error) {
	e, err := ParseEntry(s)
	if err == nil && e.Kind == KindWildcard && !strings.Contains(e.Name, ".") {
		err = &EntryError{Entry: s, Reason: "wildcard needs at least two labels in an allow list (it would allow a whole top-level domain)"}
	}
	return e, err
}

// newPolicy parses the lists, returning every error joined.
func newPolicy(allow, deny, mapHosts []string) (*policy, error) {
	p := &policy{pins: map[string][]netip.Addr{}}
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
func (p *policy) denied(t target) (Entry, bool) {
	for _, e := range p.deny {
		if t.matches(e) {
			return e, true
		}
	}
	return Entry{}, false
}

// deniedAddr returns the first deny entry matching a resolved address.
func (p *policy) deniedAddr(a netip.Addr, port uint16) (Entry, bool) {
	for _, e := range p.deny {
		if e.matchAddr(a, port) {
			return e, true
		}
	}
	return Entry{}, false
}

// allowed returns the first configured or session allow entry matching the
// target; session reports which list it came from.
func (p *policy) allowed(t target) (e Entry, session, ok bool) {
	for _, e := range p.allow {
		if t.matches(e) {
			return e, false, true
		}
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	for _, e := range p.session {
		if t.matches(e) {
			return e, true, true
		}
	}
	return Entry{}, false, false
}

// addSession adds an allow-always answer.
func (p *policy) addSession(e Entry) {
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
func (p *policy) exempt(a netip.Addr, port uint16, block netip.Prefix) (Entry, bool) {
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
func (p *policy) pinsOpen(pins []netip.Addr, port uint16) bool {
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

// target is what a request asks to reach: a normalised name or an IP
// literal, and a port.
type target struct {
	host string     // normalised name, or the canonical address text
	addr netip.Addr // valid for IP literals
	port uint16
}

// newTarget normalises a requested host and port.
func newTarget(host string, port uint16) (target, error) {
	if port == 0 {
		return target{}, errors.New("port 0")
	}
	if a, ok, err := parseIPHost(host); err != nil {
		return target{}, err
	} else if ok {
		return target{host: a.String(), addr: a, port: port}, nil
	}
	n, err := normalizeName(host)
	if err != nil {
		return target{}, err
	}
	return target{host: n, port: port}, nil
}

// matches applies an entry: names match name and wildcard entries only, IP
// literals match IP and CIDR entries only.
func (t target) matches(e Entry) bool {
	if t.addr.IsValid() {
		return e.matchAddr(t.addr, t.port)
	}
	return e.matchName(t.host, t.port)
}

// String returns host:port, bracketing IPv6.
func (t target) String() string {
	if t.addr.Is6() {
		return "[" + t.host + "]:" + strconv.Itoa(int(t.port))
	}
	return t.host + ":" + strconv.Itoa(int(t.port))
}
