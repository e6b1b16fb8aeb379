//go:build !windows

package api

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"
)

// DefaultSocket is the control socket of the user running this program:
// $XDG_RUNTIME_DIR/airlock/airlock.sock, else a per-user folder under the
// cache folder.
func DefaultSocket() (string, error) {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "airlock", "airlock.sock"), nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("api: no folder for the control socket: %w", err)
	}
	return filepath.Join(d, "airlock", "run", "airlock.sock"), nil
}

// listenControl listens on the control socket at path: its folder is made
// 0700 (and must belong to this user), the socket is 0600, and a stale
// socket left by a crashed service is replaced; a live one is ErrRunning.
func listenControl(path string) (net.Listener, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("api: socket folder: %w", err)
	}
	if err := checkPrivate(dir); err != nil {
		return nil, err
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("%w (%s)", ErrRunning, path)
	}
	_ = os.Remove(path)
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("api: listen on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("api: %w", err)
	}
	return &peerListener{Listener: l}, nil
}

// dialControl connects to the control socket.
func dialControl(ctx context.Context, path string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "unix", path)
}
