package api

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/Microsoft/go-winio"
	"golang.org/x/sys/windows"
)

// DefaultSocket is the control pipe of the user running this program.
func DefaultSocket() (string, error) {
	u := os.Getenv("USERNAME")
	if u == "" {
		return "", errors.New("api: %USERNAME% is not set")
	}
	return `\\.\pipe\airlock-` + strings.Map(func(r rune) rune {
		if r == '\\' || r == '/' || r == ':' {
			return '-'
		}
		return r
	}, u), nil
}

// listenControl listens on a named pipe only this user (and SYSTEM) may
// open; network logons are refused. A pipe already served is ErrRunning.
func listenControl(path string) (net.Listener, error) {
	if c, err := winio.DialPipe(path, ptr(time.Second)); err == nil {
		c.Close()
		return nil, fmt.Errorf("%w (%s)", ErrRunning, path)
	}
	sid, err := currentUserSID()
	if err != nil {
		return nil, err
	}
	sddl := "D:P(D;;GA;;;NU)(A;;GA;;;SY)(A;;GA;;;" + sid + ")"
	l, err := winio.ListenPipe(path, &winio.PipeConfig{SecurityDescriptor: sddl, InputBufferSize: 64 << 10, OutputBufferSize: 64 << 10})
	if err != nil {
		return nil, fmt.Errorf("api: listen on %s: %w", path, err)
	}
	return l, nil
}

// dialControl connects to the control pipe.
func dialControl(ctx context.Context, path string) (net.Conn, error) {
	c, err := winio.DialPipeContext(ctx, path)
	if err != nil {
		// Shape it like a refused unix dial so callers see ErrNotRunning.
		return nil, &net.OpError{Op: "dial", Net: "pipe", Err: err}
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
