package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"golang.org/x/net/idna"
)

// maxHostLen bounds what NormalizeHost looks at; a DNS name has at most 253
// octets, and IDNA input longer than a few times that is not a host name.
const maxHostLen = 1024

// idnaProfile is the strict UTS #46 lookup profile: mapping (case, width),
// STD3 ASCII rules (letters, digits, hyphen), hyphen and joiner checks, the
// Bidi rule and DNS length limits. Non-transitional, like browsers.
var idnaProfile = idna.New(
	idna.MapForLookup(),
	idna.BidiRule(),
	idna.CheckHyphens(true),
	idna.CheckJoiners(true),
	idna.VerifyDNSLength(true),
	idna.Transitional(false),
)

// NormalizeHost returns the canonical form of a host: an IP literal in its
// canonical text form (IPv4-mapped IPv6 unmapped to IPv4, brackets removed),
// or a domain name in lower case, without its trailing dot, IDNA-encoded to
// ASCII under a strict profile. Names that are neither (invalid characters,
// empty or over-long labels, a numeric last label such as "127.1" that some
// resolvers would read as an address) are refused.
func NormalizeHost(s string) (string, error) {
	if a, ok, err := parseIPHost(s); ok || err != nil {
		if err != nil {
			return "", err
		}
		return a.String(), nil
	}
	return normalizeName(s)
}

// parseIPHost reports whether s is an IP literal (optionally in brackets),
// returning it unmapped. A zone (fe80::1%eth0) is an error: it names an
// interface of the host, which the guest has no business choosing.
func parseIPHost(s string) (netip.Addr, bool, error) {
	bracketed := strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]")
	if bracketed {
		s = s[1 : len(s)-1]
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		if bracketed {
			return netip.Addr{}, false, errors.New("brackets hold an IPv6 address only")
		}
		return netip.Addr{}, false, nil
	}
	if a.Zone() != "" {
		return netip.Addr{}, false, errors.New("IPv6 zones are not allowed")
	}
	if bracketed && !a.Is6() {
		return netip.Addr{}, false, errors.New("brackets hold an IPv6 address only")
	}
	return a.Unmap(), true, nil
}

// normalizeName is NormalizeHost for names that are not IP literals.
func normalizeName(s string) (string, error) {
	if len(s) > maxHostLen {
		return "", errors.New("name too long")
	}
	s = strings.TrimSuffix(s, ".")
	if s == "" {
		return "", errors.New("empty name")
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x80 {
			continue // left to IDNA
		}
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return "", fmt.Errorf("invalid character %q", rune(c))
		}
	}
	if strings.HasPrefix(s, ".") || strings.Contains(s, "..") || strings.HasSuffix(s, ".") {
		return "", errors.New("empty label")
	}
	out, err := idnaProfile.ToASCII(strings.ToLower(s))
	if err != nil {
		return "", fmt.Errorf("invalid name: %w", err)
	}
	// The IDNA mapping may turn full-width characters into ASCII ones,
	// including dots and digits; check the result again.
	for i := 0; i < len(out); i++ {
		c := out[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return "", fmt.Errorf("invalid character %q", rune(c))
		}
	}
	labels := strings.Split(out, ".")
	for _, l := range labels {
		if l == "" {
			return "", errors.New("empty label")
		}
	}
	if isNumericLabel(labels[len(labels)-1]) {
		return "", errors.New("numeric last label: not a valid IP address nor a domain name")
	}
	return out, nil
}

// isNumericLabel reports whether a label would be read as a number by an
// inet_aton-style parser (decimal, octal or 0x hex). Top-level domains are
// never numeric, so such a name is an obfuscated address.
func isNumericLabel(l string) bool {
	if strings.HasPrefix(l, "0x") {
		l = l[2:]
		if l == "" {
			return true
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
				return false
			}
		}
		return true
	}
	for i := 0; i < len(l); i++ {
		if l[i] < '0' || l[i] > '9' {
			return false
		}
	}
	return true
}

// SplitHostPort splits "host", "host:port", "[v6]", "[v6]:port" and a bare
// IPv6 address or prefix (more than one colon, no port). port is 0 when
// absent.
func SplitHostPort(s string) (host string, port uint16, err error) {
	var p string
	hasPort := false
	switch {
	case strings.HasPrefix(s, "["):
		i := strings.IndexByte(s, ']')
		if i < 0 {
			return "", 0, errors.New("missing ]")
		}
		host, rest := s[:i+1], s[i+1:]
		if rest != "" {
			if rest[0] != ':' {
				return "", 0, fmt.Errorf("unexpected %q after ]", rest)
			}
			p, hasPort = rest[1:], true
		}
		s = host
	case strings.Count(s, ":") == 1:
		i := strings.IndexByte(s, ':')
		s, p, hasPort = s[:i], s[i+1:], true
	}
	if hasPort {
		if port, err = parsePort(p); err != nil {
			return "", 0, err
		}
	}
	return s, port, nil
}

// parsePort parses a decimal port in 1..65535.
func parsePort(p string) (uint16, error) {
	if p == "" {
		return 0, errors.New("empty port")
	}
	for i := 0; i < len(p); i++ {
		if p[i] < '0' || p[i] > '9' {
			return 0, fmt.Errorf("invalid port %q", p)
		}
	}
	n, err := strconv.ParseUint(p, 10, 32)
	if err != nil || n < 1 || n > 65535 {
		return 0, errors.New("port out of range")
	}
	return uint16(n), nil
}
