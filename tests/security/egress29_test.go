//go:build e2e

package security

import (
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/app/egress"
)

// TestPinnedNameOtherPorts: pinned.test is pinned to 127.0.0.2 and allowed
// on the allowed server's port only. The canary listens on every host
// address, 127.0.0.2 included: it is a second loopback service under the
// pinned name, on another port, as a database or a debugging port would
// be. Reaching it by HTTP, CONNECT or SOCKS is an escape (issue 29, item
// 1); the gate must refuse it as a private address, and never dial it.
func TestPinnedNameOtherPorts(t *testing.T) {
	t.Parallel()
	p := probe(t)
	C := canary.port
	_, A, _ := strings.Cut(allowedAddr, ":")
	raw := func(req string) string { return p + " raw '" + req + "'" }
	cases := []gateCase{
		{name: "pinned name, another loopback port, by HTTP", cmd: raw(get("pinned.test", C)), want: rs(egress.ReasonPrivateAddress)},
		{name: "pinned name, another loopback port, by the Go client", cmd: p + " get http://pinned.test:" + C + "/", want: rs(egress.ReasonPrivateAddress)},
		{name: "pinned name, another loopback port, by CONNECT", cmd: raw("CONNECT pinned.test:" + C + " HTTP/1.1\\n\\n"), want: rs(egress.ReasonPrivateAddress)},
		{name: "pinned name, another loopback port, by SOCKS", cmd: p + " socks5 connect name pinned.test " + C, want: rs(egress.ReasonPrivateAddress)},
		{name: "pinned name in other spelling, another port, by SOCKS", cmd: p + " socks5 connect name PINNED.test. " + C, want: rs(egress.ReasonPrivateAddress)},
		{name: "pinned name, a port scan of the host's loopback (22, 5432, 2375)", cmd: p + " socks5 connect name pinned.test 22; " + p + " socks5 connect name pinned.test 5432; " +
			p + " socks5 connect name pinned.test 2375; exit 1", want: rs(egress.ReasonPrivateAddress)},
		{name: "pinned name, allowed port then another on one connection", cmd: raw(get("pinned.test", A) + get("pinned.test", C)), want: rs(egress.ReasonPrivateAddress), allowedOK: true},
	}
	t.Run("gate", func(t *testing.T) {
		for _, c := range cases {
			attack(t, netFamily, c.name, func(a *Attack) {
				a.Parallel()
				runGateCase(a, c)
			})
		}
		// A control: the pinned name works on its allowed port, so the
		// refusals are the port's, not a broken pin.
		t.Run("control: pinned.test works on its port", func(t *testing.T) {
			t.Parallel()
			task, r := netTask(t, p+" get http://pinned.test:"+A+"/", "")
			if r.Exit.Code != 0 || !strings.Contains(r.Stdout, "status=200") {
				t.Fatalf("the pinned name's allowed port is not reachable: %s", r)
			}
			if d := decisionsOf(t, task, 1)[0]; d.Action != egress.ActionAllow || d.Reason != egress.ReasonAllowedByRule {
				t.Fatalf("logged %+v", d)
			}
		})
	})
}

// TestSpecialIPv6Ranges: allowed names resolving to an IPv4-translated
// (SIIT) form of loopback, a Teredo address and the IPv6 documentation
// range are refused after resolution and never dialled (issue 29, item 8).
func TestSpecialIPv6Ranges(t *testing.T) {
	t.Parallel()
	p := probe(t)
	C := canary.port
	raw := func(req string) string { return p + " raw '" + req + "'" }
	cases := []gateCase{
		{name: "allowed name resolving to SIIT ::ffff:0:127.0.0.1", cmd: raw(get("siit.test", C)), want: rs(egress.ReasonPrivateAddress)},
		{name: "CONNECT to an allowed name resolving to SIIT", cmd: raw("CONNECT siit.test:" + C + " HTTP/1.1\\n\\n"), want: rs(egress.ReasonPrivateAddress)},
		{name: "allowed name resolving to a Teredo address", cmd: raw(get("teredo.test", C)), want: rs(egress.ReasonPrivateAddress)},
		{name: "SOCKS to an allowed name resolving to 3fff::1", cmd: p + " socks5 connect name doc6.test " + C, want: rs(egress.ReasonPrivateAddress)},
		{name: "SIIT literal [::ffff:0:7f00:1]", cmd: raw(get("[::ffff:0:7f00:1]", C)), want: rs(egress.ReasonPrivateAddress)},
		{name: "SOCKS IPv6 Teredo literal", cmd: p + " socks5 connect ipv6 2001:0:4136:e378:8000:63bf:3fff:fdd2 " + C, want: rs(egress.ReasonPrivateAddress)},
	}
	for _, c := range cases {
		attack(t, netFamily, c.name, func(a *Attack) {
			a.Parallel()
			runGateCase(a, c)
		})
	}
}
