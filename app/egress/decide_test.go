package egress

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/airlock-sandbox/airlock/app/egress/policy"
)

// TestDecidePins: a map-host pin says where a name goes; the allow entries
// (with their ports) and the Decider still say whether it may be reached,
// and a pinned special address is open only for a configured entry.
func TestDecidePins(t *testing.T) {
	tests := []struct {
		name     string
		allow    []string
		deny     []string
		pins     []string
		verdict  Verdict // with a Decider; -1 without one
		host     string
		port     uint16
		reason   Reason
		rule     string // substring
		addrs    []string
		asked    bool
		inDetail string
	}{
		// The case: only port 8000 of the pinned loopback name.
		{name: "allowed port of a pinned loopback name", allow: []string{"files.test:8000"}, pins: []string{"files.test=127.0.0.1"}, verdict: -1,
			host: "files.test", port: 8000, reason: ReasonAllowedByRule, rule: "files.test:8000, map-host files.test=127.0.0.1", addrs: []string{"127.0.0.1"}},
		{name: "other port of a pinned loopback name", allow: []string{"files.test:8000"}, pins: []string{"files.test=127.0.0.1"}, verdict: -1,
			host: "files.test", port: 5432, reason: ReasonPrivateAddress, rule: "map-host files.test=127.0.0.1", inDetail: "no allow rule names files.test:5432"},
		{name: "pin without any allow entry", pins: []string{"files.test=127.0.0.1"}, verdict: -1,
			host: "files.test", port: 8000, reason: ReasonPrivateAddress},
		{name: "other port, a Decider that would allow is not asked", allow: []string{"files.test:8000"}, pins: []string{"files.test=127.0.0.1"}, verdict: AllowAlways,
			host: "files.test", port: 5432, reason: ReasonPrivateAddress},
		{name: "pinned name allowed on every port", allow: []string{"files.test"}, pins: []string{"files.test=127.0.0.1"}, verdict: -1,
			host: "files.test", port: 5432, reason: ReasonAllowedByRule, addrs: []string{"127.0.0.1"}},
		{name: "wildcard entry opens the pinned name", allow: []string{"*.corp.test:443"}, pins: []string{"git.corp.test=10.1.2.3"}, verdict: -1,
			host: "git.corp.test", port: 443, reason: ReasonAllowedByRule, addrs: []string{"10.1.2.3"}},
		{name: "wildcard entry with another port", allow: []string{"*.corp.test:443"}, pins: []string{"git.corp.test=10.1.2.3"}, verdict: -1,
			host: "git.corp.test", port: 22, reason: ReasonPrivateAddress},
		{name: "pin to a public address, no entry, no Decider", pins: []string{"api.test=8.8.8.8"}, verdict: -1,
			host: "api.test", port: 443, reason: ReasonNoMatchingRule, rule: "map-host api.test=8.8.8.8"},
		{name: "pin to a public address, the Decider allows", pins: []string{"api.test=8.8.8.8"}, verdict: AllowOnce,
			host: "api.test", port: 443, reason: ReasonAllowedByAsk, addrs: []string{"8.8.8.8"}, asked: true},
		{name: "pin to a public address, the Decider denies", pins: []string{"api.test=8.8.8.8"}, verdict: Deny,
			host: "api.test", port: 443, reason: ReasonAskDenied, asked: true},
		{name: "pin to a public address on an allowed port", allow: []string{"api.test:443"}, pins: []string{"api.test=8.8.8.8"}, verdict: -1,
			host: "api.test", port: 443, reason: ReasonAllowedByRule, addrs: []string{"8.8.8.8"}},
		{name: "pinned loopback exempted by an address entry still needs the name", allow: []string{"127.0.0.1"}, pins: []string{"files.test=127.0.0.1"}, verdict: -1,
			host: "files.test", port: 5432, reason: ReasonNoMatchingRule},
		{name: "pinned loopback exempted by an address entry, the Decider allows", allow: []string{"127.0.0.1:5432"}, pins: []string{"files.test=127.0.0.1"}, verdict: AllowOnce,
			host: "files.test", port: 5432, reason: ReasonAllowedByAsk, addrs: []string{"127.0.0.1"}, asked: true},
		{name: "a pin does not open the address itself", allow: []string{"files.test:8000"}, pins: []string{"files.test=127.0.0.1"}, verdict: -1,
			host: "127.0.0.1", port: 8000, reason: ReasonPrivateAddress},
		{name: "pin mixing loopback and public, other port: public only", allow: []string{"files.test:8000"}, pins: []string{"files.test=127.0.0.1", "files.test=8.8.8.8"}, verdict: AllowOnce,
			host: "files.test", port: 5432, reason: ReasonAllowedByAsk, addrs: []string{"8.8.8.8"}, asked: true},
		{name: "deny entry wins over the pin", allow: []string{"files.test"}, deny: []string{"files.test:22"}, pins: []string{"files.test=127.0.0.1"}, verdict: -1,
			host: "files.test", port: 22, reason: ReasonDeniedByRule},
		{name: "deny address entry applies to a pin", allow: []string{"files.test"}, deny: []string{"127.0.0.1"}, pins: []string{"files.test=127.0.0.1"}, verdict: -1,
			host: "files.test", port: 80, reason: ReasonDeniedByRule},
		{name: "metadata pin on the allowed port", allow: []string{"meta.test:80"}, pins: []string{"meta.test=169.254.169.254"}, verdict: -1,
			host: "meta.test", port: 80, reason: ReasonAllowedByRule, addrs: []string{"169.254.169.254"}},
		{name: "metadata pin on another port", allow: []string{"meta.test:80"}, pins: []string{"meta.test=169.254.169.254"}, verdict: AllowAlways,
			host: "meta.test", port: 8080, reason: ReasonMetadataAddress},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{Allow: tt.allow, Deny: tt.deny, MapHosts: tt.pins, Resolver: fakeResolver{}}
			var dec *funcDecider
			if tt.verdict >= 0 {
				dec = &funcDecider{f: func(context.Context, Request) (Verdict, error) { return tt.verdict, nil }}
				cfg.Decider = dec
			}
			g, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			tg, err := policy.NewTarget(tt.host, tt.port)
			if err != nil {
				t.Fatal(err)
			}
			pl := g.decide(context.Background(), "task", ProtoConnect, tg)
			var addrs []string
			for _, a := range pl.addrs {
				addrs = append(addrs, a.String())
			}
			if pl.reason != tt.reason || !strings.Contains(pl.rule, tt.rule) || !slices.Equal(addrs, tt.addrs) || !strings.Contains(pl.detail, tt.inDetail) {
				t.Fatalf("decide(%s:%d) = %s rule %q addrs %v detail %q; want %s rule %q addrs %v detail %q",
					tt.host, tt.port, pl.reason, pl.rule, addrs, pl.detail, tt.reason, tt.rule, tt.addrs, tt.inDetail)
			}
			if asked := dec != nil && dec.calls.Load() > 0; asked != tt.asked {
				t.Fatalf("asked = %v; want %v", asked, tt.asked)
			}
		})
	}
}

// TestDecideSessionEntryDoesNotOpenPin: an allow-always answer adds a
// session entry; it never opens a pinned special address, even once the
// pin exists (SetPolicy added it after the answer).
func TestDecideSessionEntryDoesNotOpenPin(t *testing.T) {
	dec := &funcDecider{f: func(context.Context, Request) (Verdict, error) { return AllowAlways, nil }}
	g, err := New(Config{Decider: dec, Resolver: fakeResolver{"files.test": {"8.8.8.8"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	tg, _ := policy.NewTarget("files.test", 5432)
	if pl := g.decide(context.Background(), "", ProtoHTTP, tg); pl.reason != ReasonAllowedByAsk {
		t.Fatalf("first: %+v", pl)
	}
	if err := g.SetPolicy(nil, nil, []string{"files.test=127.0.0.1"}); err != nil {
		t.Fatal(err)
	}
	pl := g.decide(context.Background(), "", ProtoHTTP, tg)
	if pl.reason != ReasonPrivateAddress || pl.addr != netip.MustParseAddr("127.0.0.1") || !strings.Contains(pl.detail, "pinned") {
		t.Fatalf("after the pin: %+v", pl)
	}
}

// TestDecideNewSpecialRanges: SIIT, Teredo and 3fff::/20 are refused as
// literals and as resolved addresses, and opened by an entry at least as
// specific as their range.
func TestDecideNewSpecialRanges(t *testing.T) {
	res := fakeResolver{"siit.test": {"::ffff:0:7f00:1"}, "teredo.test": {"2001:0:4136:e378:8000:63bf:3fff:fdd2"}, "doc.test": {"3fff::1"}}
	tests := []struct {
		allow  []string
		host   string
		reason Reason
	}{
		{nil, "::ffff:0:7f00:1", ReasonPrivateAddress},
		{nil, "::ffff:0:808:808", ReasonPrivateAddress},
		{nil, "2001::1", ReasonPrivateAddress},
		{nil, "3fff::1", ReasonPrivateAddress},
		{[]string{"siit.test"}, "siit.test", ReasonPrivateAddress},
		{[]string{"teredo.test"}, "teredo.test", ReasonPrivateAddress},
		{[]string{"doc.test"}, "doc.test", ReasonPrivateAddress},
		{[]string{"::/0"}, "2001::1", ReasonPrivateAddress},
		{[]string{"2000::/3"}, "3fff::1", ReasonPrivateAddress},
		{[]string{"2001::/32"}, "2001::1", ReasonAllowedByRule},
		{[]string{"3fff::1"}, "3fff::1", ReasonAllowedByRule},
		{[]string{"teredo.test", "2001::/32"}, "teredo.test", ReasonAllowedByRule},
		{[]string{"::ffff:0:0:0/96"}, "::ffff:0:7f00:1", ReasonAllowedByRule},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.allow, ",")+" "+tt.host, func(t *testing.T) {
			g, err := New(Config{Allow: tt.allow, Resolver: res})
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			tg, err := policy.NewTarget(tt.host, 443)
			if err != nil {
				t.Fatal(err)
			}
			if pl := g.decide(context.Background(), "", ProtoSOCKS, tg); pl.reason != tt.reason {
				t.Fatalf("decide = %+v; want %s", pl, tt.reason)
			}
		})
	}
}

// TestPinOpensOnlyTheAllowedPort: with files.test:PORT allowed and
// files.test pinned to loopback, a second loopback service under the same
// name on another port is refused by HTTP, CONNECT and SOCKS, logged as
// private-address, and never dialled; the allowed port works.
func TestPinOpensOnlyTheAllowedPort(t *testing.T) {
	open := httptest.NewServer(origin())
	defer open.Close()
	var hits atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer other.Close()
	op, xp := portOf(t, open.Listener.Addr().String()), portOf(t, other.Listener.Addr().String())
	tg := startGate(t, Config{Allow: []string{"files.test:" + op}, MapHosts: []string{"files.test=127.0.0.1"}})

	resp, _ := rawRequest(t, tg.httpAddr, "GET http://files.test:"+op+"/echo HTTP/1.1\r\nHost: files.test:"+op+"\r\n\r\n")
	if resp.StatusCode != 200 {
		t.Fatalf("the allowed port: %s", resp.Status)
	}
	resp, body := rawRequest(t, tg.httpAddr, "GET http://files.test:"+xp+"/ HTTP/1.1\r\nHost: files.test:"+xp+"\r\n\r\n")
	if resp.StatusCode != 403 || resp.Header.Get("X-Airlock-Decision") != "deny; reason=private-address" ||
		!strings.Contains(body, "--allow files.test:"+xp) {
		t.Fatalf("HTTP to the other port: %s %q\n%s", resp.Status, resp.Header.Get("X-Airlock-Decision"), body)
	}
	resp, _ = rawRequest(t, tg.httpAddr, "CONNECT files.test:"+xp+" HTTP/1.1\r\nHost: files.test:"+xp+"\r\n\r\n")
	if resp.StatusCode != 403 {
		t.Fatalf("CONNECT to the other port: %s", resp.Status)
	}
	n, _ := strconv.Atoi(xp)
	if _, _, _, rep := (socksClient{}).dial(t, tg.socksAddr, "files.test", uint16(n)); rep != repNotAllowed {
		t.Fatalf("SOCKS to the other port: reply %#x", rep)
	}
	for _, p := range []Protocol{ProtoHTTP, ProtoConnect, ProtoSOCKS} {
		d := waitDecision(t, tg.Gate, func(d Decision) bool { return d.Protocol == p && d.Port == uint16(n) })
		if d.Action != ActionDeny || d.Reason != ReasonPrivateAddress || d.Addr != "127.0.0.1" || !strings.Contains(d.Detail, "pinned") {
			t.Errorf("%s: %+v", p, d)
		}
	}
	if hits.Load() != 0 || slices.ContainsFunc(tg.dialer.calls(), func(a string) bool { return strings.HasSuffix(a, ":"+xp) }) {
		t.Fatalf("the other port was reached: %d requests, dials %v", hits.Load(), tg.dialer.calls())
	}
}
