package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
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
	host, port, err := SplitHostPort(s)
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
