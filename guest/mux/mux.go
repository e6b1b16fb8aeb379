// Package mux carries port-addressed, flow-controlled byte streams over one
// ordered byte stream (a virtio-serial port), so a hypervisor without vsock
// offers the same Dial(port) / Listen(port) transport as one with it.
//
// The host side is Client, the guest side is Server. The guest speaks first
// (a hello) so the host never writes into a port the guest has not opened.
// Everything the peer sends is bounded: frame sizes, per-stream buffering
// (credit-based windows), the number of open streams and pending accepts.
package mux

import (
	"context"
	"errors"
	"io"
	"net"
)

// Errors callers can test with errors.Is.
var (
	// ErrClosed is returned once the session has ended.
	ErrClosed = errors.New("mux: session closed")
	// ErrRefused is returned by Dial when the peer has no listener on the port.
	ErrRefused = errors.New("mux: connection refused")
	// ErrPortInUse is returned by Listen for a port already listened on.
	ErrPortInUse = errors.New("mux: port already in use")
	// ErrProtocol wraps every violation of the wire protocol by the peer.
	ErrProtocol = errors.New("mux: protocol violation")
)

// Config bounds a session. Zero fields take defaults.
type Config struct {
	// MaxStreams bounds concurrently open streams (default 1024).
	MaxStreams int
	// AcceptBacklog bounds streams waiting in a listener's Accept (default 64).
	AcceptBacklog int
	// Window is the per-stream receive buffer in bytes (default 256 KiB).
	Window int
}

// Session is one multiplexed connection. Its methods are safe for concurrent use.
type Session struct{ _ struct{} }

// Client starts the host side over conn. It returns at once; Dial waits for
// the guest's hello (bounded by the Dial context).
func Client(conn io.ReadWriteCloser, cfg Config) *Session { panic("mux: not implemented") }

// Server starts the guest side over conn and sends the hello.
func Server(conn io.ReadWriteCloser, cfg Config) *Session { panic("mux: not implemented") }

// Dial opens a stream to port on the peer.
func (s *Session) Dial(ctx context.Context, port uint32) (net.Conn, error) {
	panic("mux: not implemented")
}

// Listen accepts streams the peer opens to port.
func (s *Session) Listen(port uint32) (net.Listener, error) { panic("mux: not implemented") }

// Close ends the session and every stream in it.
func (s *Session) Close() error { panic("mux: not implemented") }

// Done is closed when the session has ended; Err then says why.
func (s *Session) Done() <-chan struct{} { panic("mux: not implemented") }

// Err is why the session ended, or nil while it runs.
func (s *Session) Err() error { panic("mux: not implemented") }
