package egress

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// freeBind sets IP_FREEBIND (IPV6_FREEBIND for tcp6) on a socket before
// it binds: the address need not exist yet (see Listen).
func freeBind(network, _ string, c syscall.RawConn) error {
	level, opt := unix.IPPROTO_IP, unix.IP_FREEBIND
	if network == "tcp6" {
		level, opt = unix.IPPROTO_IPV6, unix.IPV6_FREEBIND
	}
	var serr error
	if err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), level, opt, 1) }); err != nil {
		return err
	}
	return serr
}
