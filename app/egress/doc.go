// Package egress is the host's egress gate: every outbound connection of
// the guest, which has no network card, arrives here as one transport
// stream and is decided, relayed and logged.
//
// It owns serving the two proxy protocols, resolving, dialling, relaying,
// the task credentials and the decision log. The rules and their parsing
// are package policy (pure: no I/O); the CA, TLS termination, secret
// injection and the scan of answers are package intercept. Neither of
// those serves, dials or logs.
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
// Deny by default. The rules (package policy) decide each target: deny
// entries first, then allow entries, then every address the gate would
// dial. When nothing matches, the Decider (if any) is asked, once for
// concurrent identical questions, within AskTimeout; allow-always adds
// host:port to the session's allow list; without a Decider the answer is
// no-matching-rule. The gate resolves names itself, has the policy check
// every address, and dials only addresses it checked (no second lookup,
// so no DNS rebinding).
//
// # Interception
//
// With a CA (package intercept), the gate terminates the TLS of tunnels to
// the hosts of its secrets (every host with Inspect): it verifies the real
// server before the guest gets its tunnel, then relays the HTTP/1.1
// requests one by one. The tunnel's Decision names the secrets added
// (never their values); a request refused inside it is a Decision of its
// own, and ends the tunnel.
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
// A gate that opens an existing log reads its last decisions back (from
// the end, across the rotated files) into the ring and numbers on after
// them, so history and Seq survive a restart.
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
