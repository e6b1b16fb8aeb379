package hcs

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/Microsoft/go-winio"
	"golang.org/x/sys/windows"
)

// platformDefaults fills what opt leaves nil with the installed service
// and Hyper-V sockets, after checking the Windows build.
func platformDefaults(opt *Options) error {
	if err := CheckBuild(windows.RtlGetVersion().BuildNumber); err != nil {
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
// user's token).
func dialService(ctx context.Context) (net.Conn, error) {
	c, err := winio.DialPipeAccessImpLevel(ctx, ServicePipe, windows.GENERIC_READ|windows.GENERIC_WRITE, winio.PipeImpLevelImpersonation)
	switch {
	case err == nil:
		return c, nil
	case errors.Is(err, windows.ERROR_FILE_NOT_FOUND):
		installed, running := serviceState()
		return nil, ServiceProblem(err, installed, running)
	case errors.Is(err, windows.ERROR_ACCESS_DENIED):
		return nil, fmt.Errorf("hcs: connect to %s: %w", ServicePipe, ErrServiceDenied)
	}
	return nil, fmt.Errorf("hcs: connect to %s: %w", ServicePipe, err)
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
