// Package egress is the host's egress gate: every outbound connection of
// the guest, which has no network card, arrives here as one transport
// stream and is decided, relayed and logged.
//
// # Serving
//
// A Gate serves the HTTP proxy protocol (CONNECT host:port tunnels and
// absolute-URI http:// requests, keep-alive, each request decided) with
// ServeHTTPProxy, and SOCKS5 (CONNECT by name, IPv4 or IPv6; no-auth and
// username/password) with ServeSOCKS, each on any net.Listener: in
// production the machine's transport listener for guest/api.PortEgressHTTP
// and PortEgressSOCKS, never a host TCP port. The guest's forwarder frames
// its streams (guest/api/egresswire), so that a half-close travels as a
// record on every backend, vz's sockets without CloseWrite included; a
// stream without the framing's preamble (a TCP client, a test) is served
// as it is.
//
//	g, err := egress.New(egress.Config{Allow: allow, Deny: deny, MapHosts: pins, LogFile: path})
//	go g.ServeHTTPProxy(httpL)
//	go g.ServeSOCKS(socksL)
//	user, pass := g.Credentials(taskID) // HTTP_PROXY=http://user:pass@127.0.0.1:3128
//	defer g.Close()
//
// # Policy
//
// Deny by default. Entries (ParseEntry) are an exact name (example.com), a
// wildcard of strict subdomains (*.example.com, not the apex; the wildcard
// only as the whole leftmost label; in allow lists at least two labels, so
// *.com is refused there but fine in a deny list), an IPv4 or IPv6 address,
// or a CIDR (masked: 10.0.0.1/8 is refused), each with an optional :port
// ([::1]:443, [fd00::/8]:443 for IPv6). Names are normalised (NormalizeHost):
// lower case, one trailing dot removed, IDNA to ASCII under a strict UTS #46
// profile (STD3 characters only, so no underscores; Bidi, hyphen, joiner and
// DNS length checks); a name whose last label is numeric (127.1, 0x7f.1) is
// refused as an obfuscated address. IPv4-mapped IPv6 is unmapped to IPv4;
// zones are refused.
//
// Deny entries are checked first and win. Name entries match names only,
// IP and CIDR entries match IP literals only, so an IP literal in a request
// needs an IP or CIDR allow entry. MapHosts pins (NAME=ADDR) make the gate
// connect NAME to ADDR without resolving; they say where a name goes, not
// whether it may be reached: the allow entries (with their ports) decide
// that as for any name. When nothing matches, the Decider (if any) is
// asked, once for concurrent identical questions, within AskTimeout;
// allow-always adds host:port to the session's allow list; without a
// Decider the answer is no-matching-rule.
//
// # Addresses
//
// The gate resolves names itself, checks every address, and dials only
// addresses it checked (no second lookup, so no DNS rebinding). Deny IP and
// CIDR entries apply to resolved addresses too. Loopback, private (RFC 1918,
// fc00::/7, fec0::/10), link-local, CGNAT, multicast, unspecified (0/8, ::),
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
// entries they add, never open such addresses: a name pinned to one with no
// matching entry is refused (private-address) without asking. A name
// resolving to both public and private addresses is connected to the
// public ones only.
//
// # Tasks
//
// Credentials gives each task a user and password for its proxy URL; the
// gate maps it back to the task (Proxy-Authorization Basic, SOCKS5
// username/password). A wrong or revoked credential is refused (407,
// SOCKS auth failure, reason auth-failed). A missing credential is decided
// with task "" unless Config.RequireCredential is set: credentials identify
// tasks, they do not authorise (every task in a guest shares one policy),
// and some tools drop the credential from proxy URLs.
//
// # Decision log
//
// Every attempt (for plain HTTP every request) is one Decision, recorded
// when the connection ends or is refused, so it carries bytes each way and
// the duration: kept in a bounded ring (Recent), appended as one JSON line
// to Config.LogFile, and sent to subscribers (Subscribe), which are never
// waited for: a slow one misses decisions and sees a gap in Seq. A long
// tunnel appears when it closes. Reasons are the stable Reason codes. A
// refusal repeated more than a few times (same task, protocol, host, port,
// reason and detail) is counted instead, one summary Decision (Repeated)
// per RepeatInterval, and the file is rotated (LogKeep old files) before it
// passes Config.LogMaxBytes: a guest cannot make the log fill the disk.
//
// Limits bounds what the guest can make the gate hold: request head size,
// head and handshake deadlines (slow clients are cut off), keep-alive idle
// time, and the number of connections at once.
//
// A refused HTTP request gets a plain-text body naming the host and how to
// allow it, and X-Airlock-Decision: deny; reason=CODE; a refused SOCKS5
// request gets the matching reply code (0x02 by rule, 0x04 unresolvable
// or unreachable, 0x05 refused, 0x07 BIND and UDP ASSOCIATE, 0x08 address
// type).
package egress
