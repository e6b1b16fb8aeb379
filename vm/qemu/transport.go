package qemu

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"

	"github.com/airlock-sandbox/airlock/guest/api"
	"github.com/airlock-sandbox/airlock/guest/mux"
	"github.com/airlock-sandbox/airlock/vm"
)

// transport carries the streams between host and guest ports. New picks
// one for the machine's whole life (newTransport): vhost-vsock when the
// host has it, else the guest/mux multiplexer on one virtio-serial port.
type transport interface {
	// kind is the transport the guest is told to use.
	kind() api.Transport
	// configure points QEMU's command line at the transport's device.
	configure(p *plan)
	// files are what QEMU inherits for the transport, first among its
	// inherited files (from fd 3 on), until QEMU is committed.
	files() []*os.File
	// committed says QEMU holds its own copies of files for good.
	committed()
	// begin starts carrying streams, once the guest is through its park
	// when it parks; Dial waits for it, Listen works before.
	begin()
	dial(ctx context.Context, port uint32) (net.Conn, error)
	listen(port uint32) (net.Listener, error)
	// close ends every stream and listener, once the machine has ended.
	close()
}

// newTransport picks the machine's transport: vsock when the host's
// /dev/vhost-vsock is usable (vhost), else the multiplexer.
func newTransport(vhost bool) (transport, error) {
	if vhost {
		cid := randomCID()
		return &vsockTransport{cid: cid, lns: newVsockListeners(cid)}, nil
	}
	return newMuxTransport()
}

// randomCID picks a vsock context id; ids below 3 are reserved, and
// 0xffffffff is VMADDR_CID_ANY.
func randomCID() uint32 {
	var b [4]byte
	rand.Read(b[:])
	return 3 + binary.LittleEndian.Uint32(b[:])%(0xfffffff0)
}

// vsockTransport is AF_VSOCK to a guest of its own context id.
type vsockTransport struct {
	cid uint32
	lns *vsockListeners
}

func (v *vsockTransport) kind() api.Transport { return api.TransportVsock }

func (v *vsockTransport) configure(p *plan) { p.Transport, p.CID = api.TransportVsock, v.cid }

func (v *vsockTransport) files() []*os.File { return nil }

func (v *vsockTransport) committed() {}

func (v *vsockTransport) begin() {}

func (v *vsockTransport) dial(ctx context.Context, port uint32) (net.Conn, error) {
	return dialVsock(ctx, v.cid, port)
}

func (v *vsockTransport) listen(port uint32) (net.Listener, error) { return v.lns.listen(port) }

func (v *vsockTransport) close() { v.lns.closeAll() }

// muxTransport is the guest/mux multiplexer over a socket pair whose other
// end QEMU inherits as the virtio-serial port's chardev.
type muxTransport struct {
	sess *mux.Session // a PendingClient, begun once the guest is through its park
	// host is the host's end of the socket pair, which sess reads. The
	// park protocol (park.go) speaks on it before sess begins.
	host net.Conn

	mu    sync.Mutex
	child *os.File // QEMU's end, until QEMU is committed
}

func newMuxTransport() (*muxTransport, error) {
	host, child, err := socketPair()
	if err != nil {
		return nil, err
	}
	c, err := net.FileConn(host)
	host.Close()
	if err != nil {
		child.Close()
		return nil, err
	}
	return &muxTransport{sess: mux.PendingClient(c, mux.HostConfig()), host: c, child: child}, nil
}

func (t *muxTransport) kind() api.Transport { return api.TransportSerial }

// configure: the child's end is the first file QEMU inherits (files).
func (t *muxTransport) configure(p *plan) { p.Transport, p.MuxFD = api.TransportSerial, 3 }

func (t *muxTransport) files() []*os.File {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.child == nil {
		return nil
	}
	return []*os.File{t.child}
}

func (t *muxTransport) committed() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.child != nil {
		t.child.Close()
		t.child = nil
	}
}

func (t *muxTransport) begin() { t.sess.Begin() }

// dial waits for the guest's hello, bounded by ctx.
func (t *muxTransport) dial(ctx context.Context, port uint32) (net.Conn, error) {
	c, err := t.sess.Dial(ctx, port)
	if errors.Is(err, mux.ErrRefused) {
		return nil, fmt.Errorf("qemu: %w: %w", vm.ErrConnRefused, err)
	}
	if err != nil {
		return nil, fmt.Errorf("qemu: %w", err)
	}
	return c, nil
}

func (t *muxTransport) listen(port uint32) (net.Listener, error) {
	l, err := t.sess.Listen(port)
	if errors.Is(err, mux.ErrPortInUse) {
		return nil, fmt.Errorf("qemu: %w: %w", vm.ErrPortInUse, err)
	}
	if err != nil {
		return nil, fmt.Errorf("qemu: %w", err)
	}
	return l, nil
}

func (t *muxTransport) close() {
	t.sess.Close()
	t.committed()
	t.host.Close()
}
