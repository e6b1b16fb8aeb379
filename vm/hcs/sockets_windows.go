package hcs

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/Microsoft/go-winio"
	"github.com/Microsoft/go-winio/pkg/guid"
	"golang.org/x/sys/windows"

	"github.com/airlock-sandbox/airlock/vm"
)

// Hyper-V socket dial retries: 3 more tries 100 ms apart.
const (
	dialRetries   = 3
	dialRetryWait = 100 * time.Millisecond
)

// hvSockets reaches the guest over Hyper-V sockets bound to one VM's
// runtime id, and serves the console pipe.
type hvSockets struct {
	userSID string
}

func newHVSockets() (*hvSockets, error) {
	u, err := windows.GetCurrentProcessToken().GetTokenUser()
	if err != nil {
		return nil, fmt.Errorf("hcs: who am I: %w", err)
	}
	return &hvSockets{userSID: u.User.Sid.String()}, nil
}

func addr(vmID string, port uint32) (*winio.HvsockAddr, error) {
	id, err := guid.FromString(vmID)
	if err != nil || id == (guid.GUID{}) {
		return nil, fmt.Errorf("hcs: bad VM id %q", vmID)
	}
	return &winio.HvsockAddr{VMID: id, ServiceID: winio.VsockServiceID(port)}, nil
}

func (s *hvSockets) Listen(vmID string, port uint32) (net.Listener, error) {
	a, err := addr(vmID, port)
	if err != nil {
		return nil, err
	}
	l, err := winio.ListenHvsock(a)
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return l, nil
}

func (s *hvSockets) Dial(ctx context.Context, vmID string, port uint32) (net.Conn, error) {
	a, err := addr(vmID, port)
	if err != nil {
		return nil, err
	}
	// A guest that is still binding its port refuses for a moment:
	// go-winio tries again (refused, unreachable, timed out) before the
	// error reaches the caller, within ctx.
	d := winio.HvsockDialer{Retries: dialRetries, RetryWait: dialRetryWait}
	c, err := d.Dial(ctx, a)
	if err != nil {
		if errors.Is(err, windows.WSAECONNREFUSED) {
			return nil, fmt.Errorf("%w: %v", vm.ErrConnRefused, err)
		}
		return nil, err
	}
	return c, nil
}

func (s *hvSockets) UserSID() string { return s.userSID }

func (s *hvSockets) ListenConsole(pipe string) (net.Listener, error) {
	return winio.ListenPipe(pipe, &winio.PipeConfig{SecurityDescriptor: ConsoleSDDL(s.userSID)})
}
