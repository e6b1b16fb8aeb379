package policy

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// decideAll runs the steps the gate runs, with resolved standing for the
// name's resolved addresses and ask for the Decider's answer ("" when
// there is none).
func decideAll(p *Policy, t Target, resolved []string, ask string) Plan {
	m := p.Match(t)
	if m.Outcome == Unmatched && ask != "" {
		m = p.Asked(t, m, "ask:"+ask, ask == "allow-always")
	}
	if m.Outcome != Allowed || t.Addr.IsValid() {
		return m
	}
	addrs := m.Pins
	if addrs == nil {
		for _, a := range resolved {
			addrs = append(addrs, netip.MustParseAddr(a))
		}
	}
	return p.Check(t, m, addrs)
}

func TestDecide(t *testing.T) {
	tests := []struct {
		name              string
		allow, deny, pins []string
		host              string
		port              uint16
		resolved          []string
		ask               string
		want              Outcome
		rule, detail      string // substrings
		addrs             []string
	}{
		{name: "deny wins", allow: []string{"x.test"}, deny: []string{"*.test"}, host: "x.test", port: 443,
			want: Denied, rule: "*.test", detail: "denied by rule *.test"},
		{name: "nothing matches", allow: []string{"a.test"}, host: "b.test", port: 443,
			want: Unmatched, detail: "no allow rule matches b.test:443"},
		{name: "port of the entry only", allow: []string{"a.test:443"}, host: "a.test", port: 80, want: Unmatched},
		{name: "public addresses only", allow: []string{"a.test"}, host: "a.test", port: 443, resolved: []string{"10.0.0.1", "8.8.8.8", "::1"},
			want: Allowed, rule: "a.test", addrs: []string{"8.8.8.8"}},
		{name: "resolved to private only", allow: []string{"a.test"}, host: "a.test", port: 443, resolved: []string{"10.0.0.1"},
			want: Private, detail: "a.test resolved to private address 10.0.0.1"},
		{name: "resolved to metadata", allow: []string{"a.test", "169.254.0.0/16"}, host: "a.test", port: 80, resolved: []string{"169.254.169.254"},
			want: Metadata},
		{name: "deny address applies to resolved ones", allow: []string{"a.test"}, deny: []string{"8.8.8.8"}, host: "a.test", port: 443, resolved: []string{"8.8.8.8"},
			want: Denied, rule: "8.8.8.8", detail: "a.test resolved to 8.8.8.8, denied by rule 8.8.8.8"},
		{name: "mapped IPv6 judged as IPv4", allow: []string{"a.test"}, host: "a.test", port: 443, resolved: []string{"::ffff:127.0.0.1"},
			want: Private},
		{name: "0.0.0.0/0 opens no loopback", allow: []string{"0.0.0.0/0"}, host: "127.0.0.1", port: 80, want: Private},
		{name: "exact entry opens loopback", allow: []string{"127.0.0.1"}, host: "127.0.0.1", port: 80,
			want: Allowed, rule: "127.0.0.1", addrs: []string{"127.0.0.1"}},
		{name: "IP literal needs an IP entry", allow: []string{"a.test"}, host: "8.8.8.8", port: 80, want: Unmatched},
		{name: "pinned loopback on the allowed port", allow: []string{"files.test:8000"}, pins: []string{"files.test=127.0.0.1"}, host: "files.test", port: 8000,
			want: Allowed, rule: "files.test:8000, map-host files.test=127.0.0.1", addrs: []string{"127.0.0.1"}},
		{name: "pinned loopback on another port is refused without asking", allow: []string{"files.test:8000"}, pins: []string{"files.test=127.0.0.1"}, host: "files.test", port: 5432, ask: "allow-always",
			want: Private, rule: "map-host files.test=127.0.0.1", detail: "no allow rule names files.test:5432"},
		{name: "pinned public, answer allows", pins: []string{"api.test=8.8.8.8"}, host: "api.test", port: 443, ask: "allow-once",
			want: Allowed, rule: "ask:allow-once", addrs: []string{"8.8.8.8"}},
		{name: "pinned public, no answer", pins: []string{"api.test=8.8.8.8"}, host: "api.test", port: 443,
			want: Unmatched, rule: "map-host api.test=8.8.8.8"},
		{name: "an answer opens the public pin only", allow: []string{"files.test:8000"}, pins: []string{"files.test=127.0.0.1", "files.test=8.8.8.8"}, host: "files.test", port: 5432, ask: "allow-once",
			want: Allowed, addrs: []string{"8.8.8.8"}},
		{name: "an answer never opens a pinned special address", allow: []string{"127.0.0.1:5432"}, pins: []string{"files.test=127.0.0.1"}, host: "files.test", port: 5432, ask: "allow-once",
			want: Allowed, addrs: []string{"127.0.0.1"}}, // the address entry exempts it, not the answer
		{name: "pinned metadata on another port", allow: []string{"meta.test:80"}, pins: []string{"meta.test=169.254.169.254"}, host: "meta.test", port: 8080, ask: "allow-always",
			want: Metadata},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := New(tt.allow, tt.deny, tt.pins)
			if err != nil {
				t.Fatal(err)
			}
			target, err := NewTarget(tt.host, tt.port)
			if err != nil {
				t.Fatal(err)
			}
			got := decideAll(p, target, tt.resolved, tt.ask)
			var addrs []string
			for _, a := range got.Addrs {
				addrs = append(addrs, a.String())
			}
			if got.Outcome != tt.want || !strings.Contains(got.Rule, tt.rule) || !strings.Contains(got.Detail, tt.detail) ||
				(tt.addrs != nil && !slices.Equal(addrs, tt.addrs)) {
				t.Fatalf("got %+v; want outcome %v, rule ~%q, detail ~%q, addrs %v", got, tt.want, tt.rule, tt.detail, tt.addrs)
			}
		})
	}
}

// TestSessionEntries: allow-always adds host:port to the session's list,
// which a new rule set keeps, and which never opens a special address.
func TestSessionEntries(t *testing.T) {
	p, _ := New(nil, nil, []string{"files.test=127.0.0.1"})
	api, _ := NewTarget("api.test", 443)
	p.Asked(api, p.Match(api), "ask:allow-always", true)
	if m := p.Match(api); m.Outcome != Allowed || m.Rule != "api.test:443 (session)" {
		t.Fatalf("after allow-always: %+v", m)
	}
	if other, _ := NewTarget("api.test", 80); p.Match(other).Outcome != Unmatched {
		t.Fatal("the session entry opened another port")
	}
	next, _ := New(nil, nil, []string{"files.test=127.0.0.1"})
	next.KeepSession(p)
	if m := next.Match(api); m.Outcome != Allowed {
		t.Fatalf("the new rule set lost the session entry: %+v", m)
	}
	files, _ := NewTarget("files.test", 8000)
	next.addSession(sessionEntry(files))
	m := next.Match(files)
	if m.Outcome != Allowed {
		t.Fatalf("files.test with a session entry: %+v", m)
	}
	if m = next.Check(files, m, m.Pins); m.Outcome != Private {
		t.Fatalf("a session entry opened a pinned loopback address: %+v", m)
	}
}
