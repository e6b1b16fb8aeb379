//go:build !linux && !windows

package api

import "net"

// peerListener relies on the socket's 0600 mode in a 0700 folder where the
// platform has no SO_PEERCRED (macOS checks the same through the modes).
type peerListener struct{ net.Listener }
