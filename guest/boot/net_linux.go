package boot

import (
	"errors"
	"fmt"
	"net/netip"

	"golang.org/x/sys/unix"
)

// loopbackUp brings "lo" up and gives it 127.0.0.1/8 if the kernel did not
// (it normally does when the interface goes up).
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	defer unix.Close(fd)

	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback: get flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback: up: %w", err)
	}

	ifr, _ = unix.NewIfreq("lo")
	err = unix.IoctlIfreq(fd, unix.SIOCGIFADDR, ifr)
	if err == nil {
		return nil
	}
	if !errors.Is(err, unix.EADDRNOTAVAIL) {
		return fmt.Errorf("loopback: get address: %w", err)
	}
	ifr, _ = unix.NewIfreq("lo")
	if err := ifr.SetInet4Addr(netip.MustParseAddr("127.0.0.1").AsSlice()); err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFADDR, ifr); err != nil {
		return fmt.Errorf("loopback: set address: %w", err)
	}
	ifr, _ = unix.NewIfreq("lo")
	_ = ifr.SetInet4Addr(netip.MustParseAddr("255.0.0.0").AsSlice())
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFNETMASK, ifr); err != nil {
		return fmt.Errorf("loopback: set netmask: %w", err)
	}
	return nil
}
