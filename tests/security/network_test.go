//go:build e2e

package security

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/app/egress"
)

const netFamily = "network escape"

// gateCase is one attempt through the gate: it must fail in the guest and
// be logged as refused with one of the wanted reasons. When allowedOK is
// set, decisions allowing the one permitted upstream (allowedAddr) are
// expected too, as in a pipelined pair.
type gateCase struct {
	name, cmd, stdin string
	want             []egress.Reason
	allowedOK        bool
	// anon: the gate cannot parse the request far enough to see the
	// credential, so its decision has no task: such cases run one at a
	// time and are matched by sequence number.
	anon bool
}

func get(host, port string) string {
	return fmt.Sprintf("GET http://%s:%s/ HTTP/1.1\\nHost: %s:%s\\n\\n", host, port, host, port)
}

// TestNetworkEscape: every way out but the gate is closed, and the gate
// refuses every trick, logging each with its reason.
func TestNetworkEscape(t *testing.T) {
	t.Parallel()
	p := probe(t)
	C := canary.port
	_, A, _ := strings.Cut(allowedAddr, ":")
	raw := func(req string) string { return p + " raw '" + req + "'" }
	rawIn := p + " raw -"

	t.Run("direct", func(t *testing.T) {
		direct := []struct{ name, cmd string }{
			{"direct to QEMU's host address 10.0.2.2", p + " dial 10.0.2.2:" + C},
			{"direct to a public IPv4 address", p + " dial 1.1.1.1:443"},
			{"direct to a LAN address 192.168.1.1", p + " dial 192.168.1.1:80"},
			{"direct to a public IPv6 address", p + " dial [2606:4700::1111]:443"},
			{"direct to IPv6 link-local fe80::2%lo", p + " dial [fe80::2%lo]:" + C},
			{"direct to the metadata address", p + " dial 169.254.169.254:80"},
			{"direct to the host's port on guest 127.0.0.1", p + " dial 127.0.0.1:" + C},
			{"direct to the host's port on guest ::1", p + " dial [::1]:" + C},
			{"vsock to the host (CID 2, the gate's port)", p + " vsock 2 1025"},
			{"vsock to the host (CID 2, the ready port)", p + " vsock 2 1023"},
			{"resolve a name in the guest", p + " resolve example.com"},
			{"DNS over UDP/53 to a public resolver", p + " udp53 8.8.8.8:53"},
			{"DNS over UDP/53 to QEMU's slirp resolver", p + " udp53 10.0.2.3:53"},
			{"DNS over UDP/53 over IPv6", p + " udp53 [2001:4860:4860::8888]:53"},
			{"DNS over UDP/53 to guest loopback", p + " udp53 127.0.0.1:53"},
			{"busybox nslookup with an explicit server", "nslookup example.com 8.8.8.8"},
			{"raw socket AF_PACKET", p + " socket packet raw 0x0300"},
			{"raw socket AF_INET/ICMP", p + " socket inet raw 1"},
			{"raw socket AF_INET6/ICMPv6", p + " socket inet6 raw 58"},
			{"ICMP ping socket", p + " socket inet dgram 1"},
			{"busybox ping 1.1.1.1", "ping -c 1 -W 2 1.1.1.1"},
			{"add a network interface", "ip link add d0 type dummy"},
			{"add an address and a default route", "ip addr add 10.0.2.15/24 dev lo && ip route add default via 10.0.2.2"},
		}
		if hostLAN != "" {
			direct = append(direct, struct{ name, cmd string }{"direct to the host's LAN address", p + " dial " + hostLANPort(C)})
		}
		for _, c := range direct {
			attack(t, netFamily, c.name, func(a *Attack) {
				a.Parallel()
				r := user(a, c.cmd)
				if r.Exit.Code == 0 || strings.Contains(r.Stdout, "ok:") || strings.Contains(r.Stdout, "connected") {
					a.breach("%s: %s", c.cmd, r)
				}
			})
		}
		attack(t, netFamily, "no resolver configured", func(a *Attack) {
			r := user(a, "test ! -e /etc/resolv.conf && ls /sys/class/net")
			if r.Exit.Code != 0 || strings.TrimSpace(r.Stdout) != "lo" {
				a.breach("the guest has a resolver or an interface: %s", r)
			}
		})
	})

	cases := []gateCase{
		// IP literals in other forms: refused as obfuscated addresses.
		{name: "decimal IP literal http://2130706433/", cmd: raw(get("2130706433", C)), want: rs(egress.ReasonBadRequest)},
		{name: "decimal IP literal via the Go client", cmd: p + " get http://2130706433:" + C + "/", want: rs(egress.ReasonBadRequest)},
		{name: "octal IP literal 0177.0.0.1", cmd: raw(get("0177.0.0.1", C)), want: rs(egress.ReasonBadRequest)},
		{name: "hex IP literal 0x7f.0.0.1", cmd: raw(get("0x7f.0.0.1", C)), want: rs(egress.ReasonBadRequest)},
		{name: "hex IP literal 0x7f000001", cmd: raw(get("0x7f000001", C)), want: rs(egress.ReasonBadRequest)},
		{name: "short IP literal 127.1", cmd: raw(get("127.1", C)), want: rs(egress.ReasonBadRequest)},
		{name: "short IP literal 0", cmd: raw(get("0", C)), want: rs(egress.ReasonBadRequest)},
		{name: "unspecified 0.0.0.0", cmd: raw(get("0.0.0.0", C)), want: rs(egress.ReasonPrivateAddress)},
		{name: "IPv4-mapped IPv6 [::ffff:127.0.0.1]", cmd: raw(get("[::ffff:127.0.0.1]", C)), want: rs(egress.ReasonPrivateAddress)},
		{name: "IPv4-mapped IPv6 in hex [::ffff:7f00:1]", cmd: raw(get("[::ffff:7f00:1]", C)), want: rs(egress.ReasonPrivateAddress)},
		{name: "IPv4-compatible IPv6 [::127.0.0.1]", cmd: raw(get("[::127.0.0.1]", C)), want: rs(egress.ReasonPrivateAddress)},
		{name: "NAT64 [64:ff9b::7f00:1]", cmd: raw(get("[64:ff9b::7f00:1]", C)), want: rs(egress.ReasonPrivateAddress)},
		{name: "6to4 [2002:7f00:1::1]", cmd: raw(get("[2002:7f00:1::1]", C)), want: rs(egress.ReasonPrivateAddress)},
		{name: "IPv6 loopback [::1]", cmd: raw(get("[::1]", C)), want: rs(egress.ReasonPrivateAddress)},
		{name: "IPv6 with a zone [fe80::1%25lo]", cmd: raw(get("[fe80::1%25lo]", C)), want: rs(egress.ReasonBadRequest)},
		{name: "IPv6 unique local fd00::1", cmd: raw(get("[fd00::1]", C)), want: rs(egress.ReasonPrivateAddress)},
		{name: "CGNAT 100.64.0.1", cmd: raw(get("100.64.0.1", C)), want: rs(egress.ReasonPrivateAddress)},
		{name: "private 10.0.0.1 via the Go client", cmd: p + " get http://10.0.0.1:" + C + "/", want: rs(egress.ReasonPrivateAddress)},
		{name: "metadata 169.254.169.254", cmd: p + " get http://169.254.169.254/latest/meta-data/", want: rs(egress.ReasonMetadataAddress)},
		{name: "metadata 100.100.100.200", cmd: raw(get("100.100.100.200", "80")), want: rs(egress.ReasonMetadataAddress)},
		{name: "metadata [fd00:ec2::254]", cmd: raw(get("[fd00:ec2::254]", "80")), want: rs(egress.ReasonMetadataAddress)},
		{name: "public IP literal without an IP rule", cmd: p + " get http://93.184.215.14/", want: rs(egress.ReasonNoMatchingRule)},
		// Userinfo, fragments and backslashes that make parsers disagree.
		{name: "userinfo http://allowed.test@127.0.0.1/", cmd: raw("GET http://allowed.test@127.0.0.1:" + C + "/ HTTP/1.1\\n\\n"), want: rs(egress.ReasonBadRequest)},
		{name: "userinfo http://127.0.0.1@allowed.test/", cmd: raw("GET http://127.0.0.1:" + C + "@allowed.test:" + A + "/ HTTP/1.1\\n\\n"), want: rs(egress.ReasonBadRequest)},
		{name: "userinfo via the Go client (allowed.test@10.0.0.1)", cmd: p + " get http://allowed.test@10.0.0.1:" + C + "/", want: rs(egress.ReasonPrivateAddress)},
		{name: "fragment http://127.0.0.1#@allowed.test/", cmd: raw("GET http://127.0.0.1:" + C + "#@allowed.test:" + A + "/ HTTP/1.1\\n\\n"), want: rs(egress.ReasonBadRequest, egress.ReasonPrivateAddress), anon: true},
		{name: "fragment http://allowed.test#@127.0.0.1/", cmd: raw("GET http://allowed.test:" + A + "#@127.0.0.1:" + C + "/ HTTP/1.1\\n\\n"), want: rs(egress.ReasonBadRequest), allowedOK: true, anon: true},
		{name: "fragment via the Go client", cmd: p + " get 'http://10.0.0.1:" + C + "#@allowed.test/'", want: rs(egress.ReasonPrivateAddress)},
		{name: `backslash http://allowed.test\@127.0.0.1/`, cmd: raw("GET http://allowed.test:" + A + "\\\\@127.0.0.1:" + C + "/ HTTP/1.1\\n\\n"), want: rs(egress.ReasonBadRequest), anon: true},
		{name: "https:// absolute URI to loopback", cmd: raw("GET https://127.0.0.1:" + C + "/ HTTP/1.1\\n\\n"), want: rs(egress.ReasonBadRequest)},
		// Denied names in other spellings.
		{name: "denied name with a trailing dot", cmd: p + " get http://secret.corp.test.:" + C + "/", want: rs(egress.ReasonDeniedByRule)},
		{name: "denied name in mixed case", cmd: raw(get("SeCrEt.CoRp.TeSt", C)), want: rs(egress.ReasonDeniedByRule)},
		{name: "denied name upper case with a trailing dot", cmd: raw(get("SECRET.CORP.TEST.", C)), want: rs(egress.ReasonDeniedByRule)},
		{name: "denied name with two trailing dots", cmd: raw(get("secret.corp.test..", C)), want: rs(egress.ReasonBadRequest)},
		{name: "denied name percent-encoded", cmd: raw(get("secret%2Ecorp.test", C)), want: rs(egress.ReasonDeniedByRule, egress.ReasonBadRequest), anon: true},
		{name: "denied name in full-width letters", cmd: raw(get("ｓｅｃｒｅｔ.corp.test", C)), want: rs(egress.ReasonDeniedByRule, egress.ReasonBadRequest)},
		{name: "denied name by CONNECT, upper case, trailing dot", cmd: raw("CONNECT SECRET.CORP.TEST.:" + C + " HTTP/1.1\\n\\n"), want: rs(egress.ReasonDeniedByRule)},
		{name: "denied name by SOCKS, mixed case, trailing dot", cmd: p + " socks5 connect name SeCrEt.corp.test. " + C, want: rs(egress.ReasonDeniedByRule)},
		{name: "IDNA homograph of the allowed name (Cyrillic a)", cmd: raw(get("аllowed.test", A)), want: rs(egress.ReasonNoMatchingRule)},
		{name: "IDNA homograph via the Go client", cmd: p + " get http://аllowed.test:" + A + "/", want: rs(egress.ReasonNoMatchingRule)},
		{name: "IDNA homograph of the denied name under the wildcard", cmd: raw(get("ѕecret.corp.test", C)), want: rs(egress.ReasonResolveFailed)},
		// Host and target disagreeing.
		{name: "Host header naming loopback", cmd: raw("GET http://allowed.test:" + A + "/ HTTP/1.1\\nHost: 127.0.0.1:" + C + "\\n\\n"), want: rs(egress.ReasonHostMismatch)},
		{name: "two Host headers", cmd: raw("GET http://allowed.test:" + A + "/ HTTP/1.1\\nHost: allowed.test:" + A + "\\nHost: 127.0.0.1:" + C + "\\n\\n"), want: rs(egress.ReasonHostMismatch), anon: true},
		{name: "loopback target with the allowed Host", cmd: raw("GET http://127.0.0.1:" + C + "/ HTTP/1.1\\nHost: allowed.test:" + A + "\\n\\n"), want: rs(egress.ReasonHostMismatch, egress.ReasonPrivateAddress)},
		{name: "origin-form request routed by Host", cmd: raw("GET / HTTP/1.1\\nHost: 127.0.0.1:" + C + "\\n\\n"), want: rs(egress.ReasonBadRequest)},
		{name: "CONNECT with a Host naming loopback", cmd: raw("CONNECT allowed.test:" + A + " HTTP/1.1\\nHost: 127.0.0.1:" + C + "\\n\\n"), want: rs(egress.ReasonHostMismatch)},
		// Ports.
		{name: "CONNECT to a port the rule does not allow", cmd: raw("CONNECT ports.test:22 HTTP/1.1\\n\\n"), want: rs(egress.ReasonNoMatchingRule)},
		{name: "HTTPS through the Go client to a port not allowed", cmd: p + " get https://ports.test:8443/", want: rs(egress.ReasonNoMatchingRule)},
		{name: "plain HTTP to a port not allowed", cmd: raw(get("ports.test", "80")), want: rs(egress.ReasonNoMatchingRule)},
		{name: "CONNECT to loopback", cmd: raw("CONNECT 127.0.0.1:" + C + " HTTP/1.1\\n\\n"), want: rs(egress.ReasonPrivateAddress)},
		{name: "CONNECT to [::1]", cmd: raw("CONNECT [::1]:" + C + " HTTP/1.1\\n\\n"), want: rs(egress.ReasonPrivateAddress)},
		{name: "DNS over TCP through CONNECT 8.8.8.8:53", cmd: raw("CONNECT 8.8.8.8:53 HTTP/1.1\\n\\n"), want: rs(egress.ReasonNoMatchingRule)},
		// Allowed names that resolve to addresses the gate must refuse.
		{name: "allowed name resolving to loopback (localhost)", cmd: raw(get("localhost", C)), want: rs(egress.ReasonPrivateAddress)},
		{name: "allowed name resolving to loopback, LOCALHOST.", cmd: raw(get("LOCALHOST.", C)), want: rs(egress.ReasonPrivateAddress)},
		{name: "allowed name resolving to 127.0.0.1 (rebind)", cmd: raw(get("rebind.test", C)), want: rs(egress.ReasonPrivateAddress)},
		{name: "allowed name resolving to ::1", cmd: raw(get("rebind6.test", C)), want: rs(egress.ReasonPrivateAddress)},
		{name: "allowed name resolving to ::ffff:127.0.0.1", cmd: raw(get("mapped.test", C)), want: rs(egress.ReasonPrivateAddress)},
		{name: "allowed name resolving to the metadata address", cmd: raw(get("meta.test", "80")), want: rs(egress.ReasonMetadataAddress)},
		{name: "allowed name resolving to private addresses only", cmd: raw(get("mixed.test", C)), want: rs(egress.ReasonPrivateAddress)},
		{name: "CONNECT to an allowed name resolving to loopback", cmd: raw("CONNECT localhost:" + C + " HTTP/1.1\\n\\n"), want: rs(egress.ReasonPrivateAddress)},
		{name: "SOCKS to an allowed name resolving to loopback", cmd: p + " socks5 connect name rebind.test " + C, want: rs(egress.ReasonPrivateAddress)},
		// SOCKS with addresses instead of names.
		{name: "SOCKS IPv4 127.0.0.1", cmd: p + " socks5 connect ipv4 127.0.0.1 " + C, want: rs(egress.ReasonPrivateAddress)},
		{name: "SOCKS IPv4 10.0.0.1", cmd: p + " socks5 connect ipv4 10.0.0.1 " + C, want: rs(egress.ReasonPrivateAddress)},
		{name: "SOCKS IPv4 metadata", cmd: p + " socks5 connect ipv4 169.254.169.254 80", want: rs(egress.ReasonMetadataAddress)},
		{name: "SOCKS IPv4 public literal", cmd: p + " socks5 connect ipv4 93.184.215.14 80", want: rs(egress.ReasonNoMatchingRule)},
		{name: "SOCKS IPv6 ::1", cmd: p + " socks5 connect ipv6 ::1 " + C, want: rs(egress.ReasonPrivateAddress)},
		{name: "SOCKS IPv6 ::ffff:127.0.0.1", cmd: p + " socks5 connect ipv6 ::ffff:127.0.0.1 " + C, want: rs(egress.ReasonPrivateAddress)},
		{name: "SOCKS IPv6 link-local fe80::1", cmd: p + " socks5 connect ipv6 fe80::1 " + C, want: rs(egress.ReasonPrivateAddress)},
		{name: "SOCKS name 2130706433", cmd: p + " socks5 connect name 2130706433 " + C, want: rs(egress.ReasonBadRequest)},
		{name: "SOCKS name 127.1", cmd: p + " socks5 connect name 127.1 " + C, want: rs(egress.ReasonBadRequest)},
		{name: "SOCKS BIND", cmd: p + " socks5 bind ipv4 0.0.0.0 0", want: rs(egress.ReasonUnsupported)},
		{name: "SOCKS UDP ASSOCIATE (DNS through the gate)", cmd: p + " socks5 udp ipv4 8.8.8.8 53", want: rs(egress.ReasonUnsupported)},
		// A second request on a kept-alive connection, or hidden in a body.
		{name: "pipelined second request to loopback", cmd: raw(get("allowed.test", A) + get("127.0.0.1", C)), want: rs(egress.ReasonPrivateAddress), allowedOK: true},
		{name: "smuggled request (Content-Length and chunked)", stdin: smuggle(A, C), cmd: rawIn, want: rs(egress.ReasonPrivateAddress, egress.ReasonBadRequest), allowedOK: true},
	}
	if hostLAN != "" {
		cases = append(cases,
			gateCase{name: "the host's LAN address through the gate", cmd: raw(get(hostLAN, C)), want: rs(egress.ReasonPrivateAddress, egress.ReasonNoMatchingRule)},
			gateCase{name: "allowed name resolving to the host's LAN address", cmd: raw(get("lan.test", C)), want: rs(egress.ReasonPrivateAddress)})
	}
	t.Run("gate", func(t *testing.T) {
		for _, c := range cases {
			if c.anon {
				continue
			}
			attack(t, netFamily, c.name, func(a *Attack) {
				a.Parallel()
				runGateCase(a, c)
			})
		}
		// A control: the one allowed upstream works, so the refusals above
		// are the gate's doing and not a broken path.
		t.Run("control: allowed.test works", func(t *testing.T) {
			t.Parallel()
			task, r := netTask(t, p+" get http://allowed.test:"+A+"/", "")
			if r.Exit.Code != 0 || !strings.Contains(r.Stdout, "status=200") {
				t.Fatalf("the allowed upstream is not reachable: %s", r)
			}
			if d := decisionsOf(t, task, 1)[0]; d.Action != egress.ActionAllow || d.Reason != egress.ReasonAllowedByRule {
				t.Fatalf("logged %+v", d)
			}
		})
	})

	t.Run("gate, unparseable requests", func(t *testing.T) {
		for _, c := range cases {
			if c.anon {
				attack(t, netFamily, c.name, func(a *Attack) { runGateCase(a, c) })
			}
		}
	})

	t.Run("slow headers", func(t *testing.T) {
		for _, mode := range []string{"http", "connect", "socks"} {
			attack(t, netFamily, "slowloris "+mode+" head one byte a second", func(a *Attack) {
				a.Parallel()
				mark := lastSeq()
				began := time.Now()
				_, r := netTask(a, p+" slow "+mode, "")
				took := time.Since(began)
				if r.Exit.Code == 0 || !strings.HasPrefix(r.Stdout, "cut after") {
					a.breach("a slow client was never cut off: %s", r)
				}
				// Generous bound: the gate's head deadline is 10 s.
				if took > 90*time.Second {
					a.breach("cut off only after %s", took)
				}
				proto := egress.ProtoHTTP
				if mode == "socks" {
					proto = egress.ProtoSOCKS
				}
				waitFor(a, func() bool {
					return len(since(mark, func(d egress.Decision) bool {
						return d.Reason == egress.ReasonTimeout && d.Protocol == proto && d.Action == egress.ActionDeny
					})) > 0
				}, "a %s timeout decision", proto)
				a.Logf("%s (%s)", strings.TrimSpace(r.Stdout), took.Round(100*time.Millisecond))
			})
		}
	})

	t.Run("oversized headers", func(t *testing.T) {
		pad := strings.Repeat("a", 40<<10)
		var many strings.Builder
		for i := 0; i < 2000; i++ {
			fmt.Fprintf(&many, "X-H%d: %s\r\n", i, strings.Repeat("b", 16))
		}
		big := []struct{ name, req string }{
			{"one 40 KiB header", "GET http://allowed.test:" + A + "/ HTTP/1.1\r\nHost: allowed.test:" + A + "\r\nX-Big: " + pad + "\r\n\r\n"},
			{"2000 small headers", "GET http://allowed.test:" + A + "/ HTTP/1.1\r\nHost: allowed.test:" + A + "\r\n" + many.String() + "\r\n"},
			{"a 40 KiB request line", "GET http://allowed.test:" + A + "/" + pad + " HTTP/1.1\r\nHost: allowed.test:" + A + "\r\n\r\n"},
			{"CONNECT with a 40 KiB header", "CONNECT allowed.test:" + A + " HTTP/1.1\r\nX-Big: " + pad + "\r\n\r\n"},
			{"a 40 KiB head that never ends", "GET http://allowed.test:" + A + "/ HTTP/1.1\r\nX-Big: " + pad},
		}
		for _, c := range big {
			attack(t, netFamily, "oversized head: "+c.name, func(a *Attack) {
				mark := lastSeq()
				_, r := netTask(a, rawIn, c.req)
				if r.Exit.Code == 0 {
					a.breach("an oversized head was served: %s", r)
				}
				if !strings.Contains(r.Stdout, "431") || !strings.Contains(r.Stdout, "reason=header-too-large") {
					a.Errorf("want 431 with reason header-too-large: %s", r)
				}
				waitFor(a, func() bool {
					return len(since(mark, func(d egress.Decision) bool { return d.Reason == egress.ReasonHeaderTooLarge })) > 0
				}, "a header-too-large decision")
			})
		}
	})
}

func hostLANPort(port string) string { return hostLAN + ":" + port }

func rs(r ...egress.Reason) []egress.Reason { return r }

// smuggle is a request whose body frames differently under Content-Length
// and chunked encoding, hiding a request to loopback.
func smuggle(allowedPort, canaryPort string) string {
	hidden := "GET http://127.0.0.1:" + canaryPort + "/ HTTP/1.1\r\nHost: 127.0.0.1:" + canaryPort + "\r\n\r\n"
	return "POST http://allowed.test:" + allowedPort + "/ HTTP/1.1\r\nHost: allowed.test:" + allowedPort +
		"\r\nContent-Length: " + fmt.Sprint(len("0\r\n\r\n")+len(hidden)) + "\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + hidden
}

// runGateCase runs one attempt through the gate and checks the guest saw a
// failure and the gate logged a refusal with a wanted reason.
func runGateCase(a *Attack, c gateCase) {
	mark := lastSeq()
	task, r := netTask(a, c.cmd, c.stdin)
	if strings.Contains(r.Stdout, secretText) {
		a.breach("the canary answered: %s", r)
	}
	var ds []egress.Decision
	collect := func() {
		if c.anon {
			waitFor(a, func() bool {
				ds = since(mark, func(d egress.Decision) bool { return d.Task == task || d.Task == "" })
				return len(ds) > 0
			}, "a decision for %s", c.name)
		} else {
			ds = decisionsOf(a, task, 1)
		}
	}
	collect()
	if c.allowedOK {
		time.Sleep(300 * time.Millisecond) // a second decision may follow
		collect()
	}
	refusedOne := false
	for _, d := range ds {
		if d.Action == egress.ActionAllow {
			// The allowed upstream, under allowed.test or pinned.test.
			if c.allowedOK && net.JoinHostPort(d.Addr, strconv.Itoa(int(d.Port))) == allowedAddr {
				continue
			}
			a.breach("the gate allowed %s:%d (%s, %s): %s", d.Host, d.Port, d.Reason, d.Rule, r)
		}
		refusedOne = true
		if !slices.Contains(c.want, d.Reason) {
			a.Errorf("logged %s for %q (host %q port %d, %s), want one of %v; guest: %s", d.Reason, c.cmd, d.Host, d.Port, d.Detail, c.want, r)
		}
	}
	if !refusedOne {
		a.Errorf("no refusal logged: %+v", ds)
	}
	if r.Exit.Code == 0 && !c.allowedOK {
		a.breach("%s succeeded in the guest: %s", c.cmd, r)
	}
	// (Go's client does not show a refused CONNECT's headers.)
	if strings.Contains(c.cmd, " raw ") || strings.Contains(c.cmd, " get http:") {
		if !strings.Contains(r.Stdout, "reason=") {
			a.Errorf("the refusal does not tell the tool why: %s", r)
		}
	}
}

// waitFor polls cond for up to 5 s.
func waitFor(t testing.TB, cond func() bool, format string, args ...any) {
	t.Helper()
	for i := 0; i < 100; i++ {
		if cond() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("not logged: "+format, args...)
}
