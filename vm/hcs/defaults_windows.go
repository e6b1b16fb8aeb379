package hcs

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/Microsoft/go-winio"
	"github.com/Microsoft/hcsshim/osversion"
	"golang.org/x/sys/windows"
)

// platformDefaults fills what opt leaves nil with the installed service
// and Hyper-V sockets, after checking the Windows build.
func platformDefaults(opt *Options) error {
	if err := CheckBuild(uint32(osversion.Build())); err != nil {
		return err
	}
	if opt.Service == nil {
		opt.Service = &Client{Dial: dialService}
	}
	if opt.Sockets == nil {
		s, err := newHVSockets()
		if err != nil {
			return err
		}
		opt.Sockets = s
	}
	return nil
}

// dialService opens the service's pipe at impersonation level: the
// service acts for this user (it adds the workspace share with the
// user's token). The access asked for is PipeClientAccess, all the pipe
// grants users; and the pipe must be owned by SYSTEM, or it is not the
// service's: while the service is stopped any user can create a pipe of
// that name, and this client would hand it an impersonation token.
func dialService(ctx context.Context) (net.Conn, error) {
	c, err := winio.DialPipeAccessImpLevel(ctx, ServicePipe, PipeClientAccess, winio.PipeImpLevelImpersonation)
	switch {
	case err == nil:
		if err := CheckPipeServer(c, ServicePipe, SystemSID); err != nil {
			c.Close()
			return nil, fmt.Errorf("hcs: %w", err)
		}
		return c, nil
	case errors.Is(err, windows.ERROR_FILE_NOT_FOUND):
		installed, running := serviceState()
		return nil, ServiceProblem(err, installed, running)
	case errors.Is(err, windows.ERROR_ACCESS_DENIED):
		return nil, fmt.Errorf("hcs: connect to %s: %w", ServicePipe, ErrServiceDenied)
	}
	return nil, fmt.Errorf("hcs: connect to %s: %w", ServicePipe, err)
}

// CheckPipeServer reads the owner of the pipe c is connected to (the
// client's handle has READ_CONTROL through GENERIC_READ) and checks it
// with CheckPipeOwner. go-winio has no call for this (its pipe API sets a
// descriptor, it does not read one back).
func CheckPipeServer(c net.Conn, pipe, want string) error {
	fd, ok := c.(interface{ Fd() uintptr })
	if !ok {
		return fmt.Errorf("%s: not a named pipe connection", pipe)
	}
	sd, err := windows.GetSecurityInfo(windows.Handle(fd.Fd()), windows.SE_KERNEL_OBJECT, windows.OWNER_SECURITY_INFORMATION)
	if err != nil {
		return fmt.Errorf("%s: read its owner: %w", pipe, err)
	}
	owner, _, err := sd.Owner()
	if err != nil {
		return fmt.Errorf("%s: read its owner: %w", pipe, err)
	}
	return CheckPipeOwner(pipe, owner.String(), want)
}

// serviceState asks the service manager about the VM service; any user
// may query a service's status.
func serviceState() (installed, running bool) {
	m, err := windows.OpenSCManager(nil, nil, windows.SC_MANAGER_CONNECT)
	if err != nil {
		return true, false // cannot tell; say "not running", the likelier case
	}
	defer windows.CloseServiceHandle(m)
	name, err := windows.UTF16PtrFromString(ServiceName)
	if err != nil {
		return false, false
	}
	s, err := windows.OpenService(m, name, windows.SERVICE_QUERY_STATUS)
	if err != nil {
		return !errors.Is(err, windows.ERROR_SERVICE_DOES_NOT_EXIST), false
	}
	defer windows.CloseServiceHandle(s)
	var st windows.SERVICE_STATUS
	if err := windows.QueryServiceStatus(s, &st); err != nil {
		return true, false
	}
	return true, st.CurrentState == windows.SERVICE_RUNNING
}
