package policy

import (
	"net/netip"
)

// addrClass names why an address is special: "loopback", "private",
// "link-local", "cgnat", "multicast", "unspecified", "broadcast",
// "reserved", "ipv4-translated", "teredo" or "metadata".
type addrClass string

// specialBlock is one range the gate refuses after resolution unless it is
// allowed explicitly. Order matters: the first match wins, so the metadata
// addresses come before the link-local range that contains one of them.
type specialBlock struct {
	prefix netip.Prefix
	class  addrClass
}

var specialBlocks = func() []specialBlock {
	list := []struct{ p, c string }{
		// Cloud metadata services: AWS/GCP/Azure/OpenStack, AWS ECS task
		// metadata, Alibaba, AWS over IPv6.
		{"169.254.169.254/32", "metadata"},
		{"169.254.170.2/32", "metadata"},
		{"100.100.100.200/32", "metadata"},
		{"fd00:ec2::254/128", "metadata"},

		{"0.0.0.0/8", "unspecified"},
		{"10.0.0.0/8", "private"},
		{"100.64.0.0/10", "cgnat"},
		{"127.0.0.0/8", "loopback"},
		{"169.254.0.0/16", "link-local"},
		{"172.16.0.0/12", "private"},
		{"192.0.0.0/24", "reserved"},
		{"192.0.2.0/24", "reserved"},
		{"192.168.0.0/16", "private"},
		{"198.18.0.0/15", "reserved"},
		{"198.51.100.0/24", "reserved"},
		{"203.0.113.0/24", "reserved"},
		{"224.0.0.0/4", "multicast"},
		{"255.255.255.255/32", "broadcast"},
		{"240.0.0.0/4", "reserved"},

		{"::/128", "unspecified"},
		{"::1/128", "loopback"},
		{"100::/64", "reserved"},
		{"2001:db8::/32", "reserved"},
		{"3fff::/20", "reserved"}, // documentation (RFC 9637)
		// IPv4-translated (SIIT, RFC 7915: ::ffff:0:a.b.c.d, not the
		// IPv4-mapped ::ffff:a.b.c.d) and Teredo (RFC 4380): both carry
		// traffic to an IPv4 address through a translator or relay.
		{"::ffff:0:0:0/96", "ipv4-translated"},
		{"2001::/32", "teredo"},
		{"fc00::/7", "private"},
		{"fe80::/10", "link-local"},
		{"fec0::/10", "private"},
		{"ff00::/8", "multicast"},
	}
	out := make([]specialBlock, len(list))
	for i, l := range list {
		out[i] = specialBlock{netip.MustParsePrefix(l.p), addrClass(l.c)}
	}
	return out
}()

// IPv6 ranges that carry an IPv4 address the traffic may end up at.
var (
	compatV4  = netip.MustParsePrefix("::/96")          // IPv4-compatible (deprecated)
	nat64     = netip.MustParsePrefix("64:ff9b::/96")   // RFC 6052 well-known prefix
	nat64Loc  = netip.MustParsePrefix("64:ff9b:1::/48") // RFC 8215 local-use
	sixToFour = netip.MustParsePrefix("2002::/16")      // 6to4
)

// classify reports whether a is special and the block that makes it so.
// IPv6 forms embedding an IPv4 address (mapped, compatible, NAT64, 6to4)
// are judged by the embedded address; their block is the address itself,
// so only an exact allow entry opens them.
func classify(a netip.Addr) (netip.Prefix, addrClass, bool) {
	a = a.Unmap()
	for _, b := range specialBlocks {
		if b.prefix.Contains(a) {
			return b.prefix, b.class, true
		}
	}
	if !a.Is6() {
		return netip.Prefix{}, "", false
	}
	b := a.As16()
	var v4 netip.Addr
	switch {
	case compatV4.Contains(a), nat64.Contains(a), nat64Loc.Contains(a):
		v4 = netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
	case sixToFour.Contains(a):
		v4 = netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]})
	default:
		return netip.Prefix{}, "", false
	}
	if _, class, ok := classify(v4); ok {
		return netip.PrefixFrom(a, 128), class, true
	}
	return netip.Prefix{}, "", false
}
