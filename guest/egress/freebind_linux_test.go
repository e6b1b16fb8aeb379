package egress

import (
	"net"
	"testing"

	"golang.org/x/sys/unix"
)

// TestListenFreeBind: the proxies' sockets are bound with IP_FREEBIND
// (IPV6_FREEBIND), which lets the agent bind them before init has the
// loopback up (guest/agent.Run).
func TestListenFreeBind(t *testing.T) {
	for _, c := range []struct {
		addr       string
		level, opt int
	}{
		{"127.0.0.1", unix.IPPROTO_IP, unix.IP_FREEBIND},
		{"::1", unix.IPPROTO_IPV6, unix.IPV6_FREEBIND},
	} {
		// Listen wants a port: take one the kernel has free.
		probe, err := net.Listen("tcp", net.JoinHostPort(c.addr, "0"))
		if err == nil {
			c.addr = probe.Addr().String()
			probe.Close()
		}
		ls, err := Listen([]Route{{Addr: c.addr, Port: 1}})
		if err != nil {
			if c.level == unix.IPPROTO_IPV6 {
				t.Logf("no IPv6 loopback here: %v", err)
				continue
			}
			t.Fatal(err)
		}
		rc, err := ls[0].(*net.TCPListener).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var v int
		var gerr error
		if err := rc.Control(func(fd uintptr) { v, gerr = unix.GetsockoptInt(int(fd), c.level, c.opt) }); err != nil || gerr != nil {
			t.Fatal(err, gerr)
		}
		closeAll(ls)
		if v != 1 {
			t.Errorf("%s: freebind %d, want 1", c.addr, v)
		}
	}
}
