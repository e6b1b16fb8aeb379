// Package policy is the egress gate's rule set: it parses and normalises
// allow, deny and map-host entries, and decides a target against them. It
// is pure: it never resolves a name, dials, asks the Decider or logs. The
// gate (package egress) does those, and hands the policy the addresses to
// check; what a refusal is called in the decision log is the gate's too.
//
// # Entries
//
// Entries (ParseEntry) are an exact name (example.com), a wildcard of
// strict subdomains (*.example.com, not the apex; the wildcard only as the
// whole leftmost label; in allow lists at least two labels, so *.com is
// refused there but fine in a deny list), an IPv4 or IPv6 address, or a
// CIDR (masked: 10.0.0.1/8 is refused), each with an optional :port
// ([::1]:443, [fd00::/8]:443 for IPv6). Names are normalised
// (NormalizeHost): lower case, one trailing dot removed, IDNA to ASCII
// under a strict UTS #46 profile (STD3 characters only, so no underscores;
// Bidi, hyphen, joiner and DNS length checks); a name whose last label is
// numeric (127.1, 0x7f.1) is refused as an obfuscated address. IPv4-mapped
// IPv6 is unmapped to IPv4; zones are refused.
//
// # Deciding
//
// Deny by default. Match applies the rules to a Target: deny entries are
// checked first and win. Name entries match names only, IP and CIDR
// entries match IP literals only, so an IP literal in a request needs an
// IP or CIDR allow entry. Map-host pins (NAME=ADDR) make the gate connect
// NAME to ADDR without resolving; they say where a name goes, not whether
// it may be reached: the allow entries (with their ports) decide that as
// for any name. When nothing matches the outcome is Unmatched, and the
// gate asks its Decider; Asked records an allowing answer (allow-always
// adds host:port to the session's allow list).
//
// # Addresses
//
// Check takes the addresses the gate would dial (the pins, or the name's
// resolved addresses) and keeps those it may. Deny IP and CIDR entries
// apply to resolved addresses too. Loopback, private (RFC 1918, fc00::/7,
// fec0::/10), link-local, CGNAT, multicast, unspecified (0/8, ::),
// broadcast, reserved/documentation ranges and cloud metadata addresses
// (169.254.169.254, 169.254.170.2, 100.100.100.200, fd00:ec2::254), the
// IPv6 documentation ranges (2001:db8::/32, 3fff::/20), IPv4-translated
// (SIIT, ::ffff:0:0:0/96) and Teredo (2001::/32) addresses, and IPv6 forms
// embedding such an IPv4 address (mapped, compatible, NAT64, 6to4), are
// refused unless a configured allow entry at least as specific as the
// refused range contains the address (so 0.0.0.0/0 opens no loopback,
// 169.254.0.0/16 opens link-local but not metadata, which needs the exact
// address), or the name is pinned to it and a configured allow entry
// matches the name and port. Answers from the Decider, and the session
// entries they add, never open such addresses: a name pinned to one with
// no matching entry is refused (Private) without asking. A name resolving
// to both public and private addresses is connected to the public ones
// only.
package policy
