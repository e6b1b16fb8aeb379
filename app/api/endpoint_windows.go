package api

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/Microsoft/go-winio"
	"golang.org/x/sys/windows"

	"github.com/airlock-sandbox/airlock/vm/hcs"
)

// DefaultSocket is the control pipe of the user running this program,
// named by the user's SID (hcs.ControlPipeName).
func DefaultSocket() (string, error) {
	sid, err := currentUserSID()
	if err != nil {
		return "", err
	}
	return hcs.ControlPipeName(sid)
}

// listenControl listens on a named pipe owned by this user that only it
// (and SYSTEM) may open; network logons are refused. A pipe this user
// already serves is ErrRunning; one another account serves is refused.
func listenControl(path string) (net.Listener, error) {
	sid, err := currentUserSID()
	if err != nil {
		return nil, err
	}
	if c, err := winio.DialPipe(path, ptr(time.Second)); err == nil {
		err = hcs.CheckPipeServer(c, path, sid)
		c.Close()
		if err != nil {
			return nil, fmt.Errorf("api: %w", err)
		}
		return nil, fmt.Errorf("%w (%s)", ErrRunning, path)
	}
	l, err := winio.ListenPipe(path, &winio.PipeConfig{SecurityDescriptor: hcs.ControlPipeSDDL(sid), InputBufferSize: 64 << 10, OutputBufferSize: 64 << 10})
	if err != nil {
		return nil, fmt.Errorf("api: listen on %s: %w", path, err)
	}
	return l, nil
}

// dialControl connects to the control pipe and checks that this user
// owns it: a pipe of that name created by another account (while this
// user's app was not running) would otherwise receive its requests,
// secrets included.
func dialControl(ctx context.Context, path string) (net.Conn, error) {
	c, err := winio.DialPipeContext(ctx, path)
	if err != nil {
		// Shape it like a refused unix dial so callers see ErrNotRunning.
		return nil, &net.OpError{Op: "dial", Net: "pipe", Err: err}
	}
	sid, err := currentUserSID()
	if err == nil {
		err = hcs.CheckPipeServer(c, path, sid)
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("api: %w", err)
	}
	return c, nil
}

func currentUserSID() (string, error) {
	tok := windows.GetCurrentProcessToken()
	u, err := tok.GetTokenUser()
	if err != nil {
		return "", fmt.Errorf("api: current user: %w", err)
	}
	return u.User.Sid.String(), nil
}

func ptr[T any](v T) *T { return &v }
