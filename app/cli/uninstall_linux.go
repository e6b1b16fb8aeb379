package cli

import (
	"errors"
	"net"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// signalService asks the process serving the control socket sock to stop
// (SIGTERM: it stops its VM and exits). The socket's peer credentials name
// the process, which must be this user's.
func signalService(sock string) error {
	c, err := net.Dial("unix", sock)
	if err != nil {
		return err
	}
	defer c.Close()
	raw, err := c.(*net.UnixConn).SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	var serr error
	if err := raw.Control(func(fd uintptr) { cred, serr = unix.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED) }); err != nil {
		return err
	}
	if serr != nil {
		return serr
	}
	if cred.Uid != uint32(os.Getuid()) || cred.Pid <= 0 {
		return errors.New("the socket is served by another user's process")
	}
	return syscall.Kill(int(cred.Pid), syscall.SIGTERM)
}
