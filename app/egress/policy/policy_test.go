package policy

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func TestNormalizeHost(t *testing.T) {
	tests := []struct {
		in, want, err string
	}{
		{in: "Example.COM", want: "example.com"},
		{in: "example.com.", want: "example.com"},
		{in: "bücher.example", want: "xn--bcher-kva.example"},
		{in: "BÜCHER.example.", want: "xn--bcher-kva.example"},
		{in: "xn--bcher-kva.example", want: "xn--bcher-kva.example"},
		{in: "ｅｘａｍｐｌｅ.com", want: "example.com"}, // full-width letters map
		{in: "localhost", want: "localhost"},
		{in: "a-b.c", want: "a-b.c"},
		{in: "1.2.3.4", want: "1.2.3.4"},
		{in: "::FFFF:10.0.0.1", want: "10.0.0.1"},
		{in: "[2001:DB8::1]", want: "2001:db8::1"},
		{in: "", err: "empty name"},
		{in: ".", err: "empty name"},
		{in: "example.com..", err: "empty label"},
		{in: "a..b", err: "empty label"},
		{in: "exa mple.com", err: `invalid character ' '`},
		{in: "under_score.com", err: `invalid character '_'`},
		{in: "a/b", err: "invalid character"},
		{in: "-lead.com", err: "invalid name"},
		{in: "xn--zz.com", err: "invalid name"},
		{in: strings.Repeat("a", 64) + ".com", err: "invalid name"},
		{in: "127.1", err: "numeric last label"},
		{in: "0x7f.0x1", err: "numeric last label"},
		{in: "2130706433", err: "numeric last label"},
		{in: "１２７.０.０.１", err: "numeric last label"}, // full-width digits
		{in: "fe80::1%eth0", err: "zones"},
		{in: "[example.com]", err: "brackets"},
		{in: "[1.2.3.4]", err: "brackets"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := NormalizeHost(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("NormalizeHost(%q) = %q, %v; want error containing %q", tt.in, got, err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("NormalizeHost(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestParseEntry(t *testing.T) {
	tests := []struct {
		in   string
		want string // canonical form; "" with err
		kind EntryKind
		err  string
	}{
		{in: "example.com", want: "example.com", kind: KindName},
		{in: " Example.com.:443 ", want: "example.com:443", kind: KindName},
		{in: "*.example.com", want: "*.example.com", kind: KindWildcard},
		{in: "*.Bücher.example:8080", want: "*.xn--bcher-kva.example:8080", kind: KindWildcard},
		{in: "*.com", want: "*.com", kind: KindWildcard}, // refused in allow lists only
		{in: "1.2.3.4", want: "1.2.3.4", kind: KindPrefix},
		{in: "1.2.3.4:80", want: "1.2.3.4:80", kind: KindPrefix},
		{in: "::1", want: "::1", kind: KindPrefix},
		{in: "[::1]", want: "::1", kind: KindPrefix},
		{in: "[::1]:443", want: "[::1]:443", kind: KindPrefix},
		{in: "::ffff:127.0.0.1", want: "127.0.0.1", kind: KindPrefix},
		{in: "10.0.0.0/8", want: "10.0.0.0/8", kind: KindPrefix},
		{in: "10.0.0.0/8:443", want: "10.0.0.0/8:443", kind: KindPrefix},
		{in: "fd00::/8", want: "fd00::/8", kind: KindPrefix},
		{in: "[fd00::/8]:443", want: "[fd00::/8]:443", kind: KindPrefix},
		{in: "::ffff:10.0.0.0/104", want: "10.0.0.0/8", kind: KindPrefix},
		{in: "", err: "empty entry"},
		{in: "*.", err: "empty domain"},
		{in: "*..", err: "empty domain"},
		{in: "*", err: "wildcard allowed only"},
		{in: "*example.com", err: "wildcard allowed only"},
		{in: "**.example.com", err: "wildcard allowed only"},
		{in: "foo.*.com", err: "wildcard allowed only"},
		{in: "*.*.com", err: "wildcard allowed only"},
		{in: "exa mple.com", err: "invalid character ' '"},
		{in: "host:99999", err: "port out of range"},
		{in: "host:0", err: "port out of range"},
		{in: "host:", err: "empty port"},
		{in: "host:http", err: "invalid port"},
		{in: "host:-1", err: "invalid port"},
		{in: "[::1", err: "missing ]"},
		{in: "[::1]x", err: "unexpected"},
		{in: "[1.2.3.4]:80", err: "brackets"},
		{in: "[10.0.0.0/8]", err: "brackets"},
		{in: "10.0.0.1/8", err: "host bits set in CIDR (did you mean 10.0.0.0/8?)"},
		{in: "10.0.0.0/33", err: "invalid CIDR"},
		{in: "example.com/8", err: "invalid CIDR"},
		{in: "fe80::1%eth0", err: "zones"},
		{in: "127.1", err: "numeric last label"},
		{in: "http://example.com", err: "invalid port"},
		{in: "user@example.com", err: "invalid character '@'"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			e, err := ParseEntry(tt.in)
			if tt.err != "" {
				if err == nil {
					t.Fatalf("ParseEntry(%q) = %v; want error containing %q", tt.in, e, tt.err)
				}
				if !strings.Contains(err.Error(), tt.err) || !strings.HasPrefix(err.Error(), `"`+tt.in+`"`) || !errors.Is(err, ErrInvalidEntry) {
					t.Fatalf("ParseEntry(%q) error %q; want it to name the entry and contain %q", tt.in, err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseEntry(%q): %v", tt.in, err)
			}
			if e.String() != tt.want || e.Kind != tt.kind {
				t.Fatalf("ParseEntry(%q) = %q kind %d; want %q kind %d", tt.in, e, e.Kind, tt.want, tt.kind)
			}
			again, err := ParseEntry(e.String())
			if err != nil || again != e {
				t.Fatalf("ParseEntry(String()) = %v, %v; want %v", again, err, e)
			}
		})
	}
}

func TestParseMapHost(t *testing.T) {
	tests := []struct{ in, name, addr, err string }{
		{in: "api.test=127.0.0.1", name: "api.test", addr: "127.0.0.1"},
		{in: " API.Test. = [::1] ", name: "api.test", addr: "::1"},
		{in: "h=::ffff:10.1.2.3", name: "h", addr: "10.1.2.3"},
		{in: "api.test", err: "NAME=ADDR"},
		{in: "*.test=1.2.3.4", err: "wildcard"},
		{in: "1.2.3.4=1.2.3.4", err: "not an address"},
		{in: "api.test=127.0.0.1:80", err: "must be an IP address"},
		{in: "api.test=other.test", err: "must be an IP address"},
		{in: "bad name=1.2.3.4", err: "invalid character"},
		{in: "=1.2.3.4", err: "empty name"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			m, err := ParseMapHost(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || !errors.Is(err, ErrInvalidEntry) {
					t.Fatalf("ParseMapHost(%q) = %v, %v; want error containing %q", tt.in, m, err, tt.err)
				}
				return
			}
			if err != nil || m.Name != tt.name || m.Addr != netip.MustParseAddr(tt.addr) {
				t.Fatalf("ParseMapHost(%q) = %v, %v; want %s=%s", tt.in, m, err, tt.name, tt.addr)
			}
		})
	}
}

func TestNewPolicyErrorsNameEveryEntry(t *testing.T) {
	_, err := New(
		[]string{"ok.example", "*.com", "exa mple.com"},
		[]string{"*.com", "host:99999"},
		[]string{"nope"},
	)
	if err == nil {
		t.Fatal("New accepted malformed entries")
	}
	for _, want := range []string{
		`allow: "*.com": wildcard needs at least two labels`,
		`allow: "exa mple.com": invalid character ' '`,
		`deny: "host:99999": port out of range`,
		`map-host: "nope": map-host needs NAME=ADDR`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), `deny: "*.com"`) {
		t.Errorf("*.com refused in a deny list: %v", err)
	}
	if !errors.Is(err, ErrInvalidEntry) {
		t.Errorf("errors.Is(%v, ErrInvalidEntry) = false", err)
	}
}

func TestEntryMatch(t *testing.T) {
	tests := []struct {
		entry string
		host  string
		port  uint16
		want  bool
	}{
		{"example.com", "example.com", 443, true},
		{"example.com", "www.example.com", 443, false},
		{"example.com:443", "example.com", 80, false},
		{"example.com:443", "example.com", 443, true},
		{"*.example.com", "example.com", 443, false},
		{"*.example.com", "a.example.com", 443, true},
		{"*.example.com", "a.b.example.com", 443, true},
		{"*.example.com", "badexample.com", 443, false},
		{"*.example.com:8080", "a.example.com", 80, false},
		{"1.2.3.4", "1.2.3.4", 80, true},
		{"1.2.3.4", "1.2.3.5", 80, false},
		{"10.0.0.0/8", "10.200.0.1", 80, true},
		{"10.0.0.0/8", "11.0.0.1", 80, false},
		{"10.0.0.0/8:443", "10.0.0.1", 80, false},
		{"fd00::/8", "fd12::1", 80, true},
		{"[::1]:443", "::1", 443, true},
		{"[::1]:443", "::ffff:127.0.0.1", 443, false},
		{"127.0.0.1", "::ffff:127.0.0.1", 443, true}, // mapped form is unmapped
		// IP literals match only IP entries; names only name entries.
		{"1.2.3.4", "one.example", 80, false},
		{"*.2.3.4.example", "1.2.3.4", 80, false},
	}
	for _, tt := range tests {
		t.Run(tt.entry+" "+tt.host, func(t *testing.T) {
			e, err := ParseEntry(tt.entry)
			if err != nil {
				t.Fatal(err)
			}
			tg, err := NewTarget(tt.host, tt.port)
			if err != nil {
				t.Fatal(err)
			}
			if got := tg.Matches(e); got != tt.want {
				t.Fatalf("%q matches %s = %v; want %v", tt.entry, tg, got, tt.want)
			}
		})
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		addr  string
		class addrClass // "" = not special
	}{
		{"8.8.8.8", ""},
		{"2606:4700::1111", ""},
		{"127.0.0.1", "loopback"},
		{"127.255.1.2", "loopback"},
		{"::1", "loopback"},
		{"10.1.2.3", "private"},
		{"172.16.0.1", "private"},
		{"172.32.0.1", ""},
		{"192.168.1.1", "private"},
		{"fc00::1", "private"},
		{"fd12:3456::1", "private"},
		{"169.254.1.1", "link-local"},
		{"fe80::1", "link-local"},
		{"100.64.0.1", "cgnat"},
		{"100.127.255.255", "cgnat"},
		{"100.128.0.1", ""},
		{"224.0.0.1", "multicast"},
		{"ff02::1", "multicast"},
		{"0.0.0.0", "unspecified"},
		{"0.1.2.3", "unspecified"},
		{"::", "unspecified"},
		{"255.255.255.255", "broadcast"},
		{"240.0.0.1", "reserved"},
		{"169.254.169.254", "metadata"},
		{"fd00:ec2::254", "metadata"},
		{"100.100.100.200", "metadata"},
		{"::ffff:127.0.0.1", "loopback"},
		{"::ffff:169.254.169.254", "metadata"},
		{"::127.0.0.1", "loopback"},    // IPv4-compatible
		{"::10.0.0.1", "private"},      // IPv4-compatible
		{"64:ff9b::a00:1", "private"},  // NAT64 of 10.0.0.1
		{"64:ff9b::808:808", ""},       // NAT64 of 8.8.8.8
		{"2002:7f00:1::1", "loopback"}, // 6to4 of 127.0.0.1
		{"2002:808:808::1", ""},
		{"::ffff:0:7f00:1", "ipv4-translated"},  // SIIT of 127.0.0.1
		{"::ffff:0:808:808", "ipv4-translated"}, // SIIT of 8.8.8.8: the translator is the hop
		{"::ffff:0:0:0", "ipv4-translated"},
		{"::fffe:0:7f00:1", ""},
		{"2001::1", "teredo"},
		{"2001:0:4136:e378:8000:63bf:3fff:fdd2", "teredo"},
		{"2001:1::1", ""},
		{"2001:db8::1", "reserved"},
		{"3fff::1", "reserved"},
		{"3fff:fff:ffff::1", "reserved"},
		{"3fff:1000::1", ""},
	}
	for _, tt := range tests {
		t.Run(tt.addr, func(t *testing.T) {
			_, class, special := classify(netip.MustParseAddr(tt.addr))
			if class != tt.class || special != (tt.class != "") {
				t.Fatalf("classify(%s) = %q, %v; want %q", tt.addr, class, special, tt.class)
			}
		})
	}
}

func FuzzParseEntry(f *testing.F) {
	for _, s := range []string{"example.com", "*.example.com:443", "[::1]:443", "10.0.0.0/8", "[fd00::/8]:1",
		"*.", "host:99999", "bücher.example", "::ffff:1.2.3.4", "a=b", "0x7f.1", "[", "]:", "*.*"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		e, err := ParseEntry(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidEntry) {
				t.Fatalf("ParseEntry(%q) error %v is not ErrInvalidEntry", s, err)
			}
			return
		}
		again, err := ParseEntry(e.String())
		if err != nil || again != e {
			t.Fatalf("ParseEntry(%q) = %q; reparsed %v, %v", s, e, again, err)
		}
		ParseMapHost(s)
	})
}

func FuzzNormalizeHost(f *testing.F) {
	for _, s := range []string{"Example.COM.", "bücher.example", "xn--bcher-kva.example", "1.2.3.4", "[::1]",
		"::ffff:10.0.0.1", "127.1", "ｅｘａｍｐｌｅ.com", "a..b", "", "ß.de", "\u200d.com"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := NormalizeHost(s)
		if err != nil {
			return
		}
		n2, err := NormalizeHost(n)
		if err != nil || n2 != n {
			t.Fatalf("NormalizeHost(%q) = %q, but NormalizeHost(%q) = %q, %v", s, n, n, n2, err)
		}
		if strings.ToLower(n) != n {
			t.Fatalf("NormalizeHost(%q) = %q not lower case", s, n)
		}
	})
}

func TestParseAllowEntry(t *testing.T) {
	if _, err := ParseAllowEntry("*.com"); err == nil || !errors.Is(err, ErrInvalidEntry) {
		t.Fatalf("ParseAllowEntry accepted *.com: %v", err)
	}
	if _, err := ParseAllowEntry("*.example.com"); err != nil {
		t.Fatal(err)
	}
}
