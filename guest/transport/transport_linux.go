//go:build linux

package transport

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/mdlayher/vsock"

	"github.com/airlock-sandbox/airlock/guest/api"
	"github.com/airlock-sandbox/airlock/guest/mux"
)

// Transport is an open connection to the host. Its methods are safe for
// concurrent use.
type Transport struct {
	kind    api.Transport
	session *mux.Session // serial only
	port    *os.File     // serial only
}

// Options say how Open opens the transport; the zero value opens it as the
// guest's devices are.
type Options struct {
	// Sys and Dev locate the kernel interfaces ("/sys", "/dev"); tests
	// point them elsewhere.
	Sys, Dev string
	// Park, for the serial transport, makes Open park first
	// (api.BootConfig.Park): write api.Parked on the port, wait for the
	// host's api.Wake however long that takes (the host may save the
	// machine meanwhile and start others from it), and hand the Wake to
	// Park before the multiplexer starts. ctx does not bound that wait.
	Park func(*api.Wake)
}

// Open prepares kind. For the serial transport it waits (bounded by ctx) for
// the virtio-serial port to appear, opens it, parks if asked, and starts
// the multiplexer, which greets the host at once.
func Open(ctx context.Context, kind api.Transport, o Options) (*Transport, error) {
	switch kind {
	case api.TransportVsock, api.TransportHVSock:
		if o.Park != nil {
			return nil, fmt.Errorf("transport: a guest parks on the serial transport only, not %s", kind)
		}
		return &Transport{kind: kind}, nil
	case api.TransportSerial:
		f, err := openSerial(ctx, o)
		if err != nil {
			return nil, err
		}
		if o.Park != nil {
			w, err := Park(f)
			if err != nil {
				f.Close()
				return nil, err
			}
			o.Park(w)
		}
		// A 1 MiB receive window, as the host gives its own streams: the host
		// sends egress downloads and stdin that far ahead of the guest's
		// reads: faster egress and fewer guest context switches than 256 KiB
		// (docs/performance.md, Figures behind the code). It costs only the
		// guest's memory, and only while a reader lags.
		cfg := mux.GuestConfig()
		cfg.Splice = true
		return &Transport{kind: kind, port: f, session: mux.Server(f, cfg)}, nil
	default:
		return nil, fmt.Errorf("transport: unknown transport %q", kind)
	}
}

// Park writes api.Parked on the serial port f and reads the host's Wake
// (Options.Park; exported for guests that open the port themselves, as
// tests/robust's hostile agent does).
func Park(f *os.File) (*api.Wake, error) {
	if _, err := f.Write(api.ParkedRecord()); err != nil {
		return nil, fmt.Errorf("transport: park: %w", err)
	}
	w, err := api.ReadWake(f)
	if err != nil {
		return nil, fmt.Errorf("transport: park: %w", err)
	}
	return w, nil
}

func openSerial(ctx context.Context, p Options) (*os.File, error) {
	if p.Sys == "" {
		p.Sys = "/sys"
	}
	if p.Dev == "" {
		p.Dev = "/dev"
	}
	// The port appears when virtio_console has probed; with the module
	// loaded by init that is normally done, but do not race it.
	for {
		name, err := FindSerialPort(p.Sys, api.SerialPortName)
		if err == nil {
			f, err := os.OpenFile(filepath.Join(p.Dev, name), os.O_RDWR, 0)
			if err != nil {
				return nil, fmt.Errorf("transport: open serial port: %w", err)
			}
			return f, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("transport: %w (%v)", err, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Kind is the transport in use.
func (t *Transport) Kind() api.Transport { return t.kind }

// Listen accepts the host's connections to port.
func (t *Transport) Listen(port uint32) (net.Listener, error) {
	if t.session != nil {
		return t.session.Listen(port)
	}
	l, err := vsock.Listen(port, nil)
	if err != nil {
		return nil, fmt.Errorf("transport: listen on vsock port %d: %w", port, err)
	}
	return l, nil
}

// DialHost connects to port on the host.
func (t *Transport) DialHost(ctx context.Context, port uint32) (net.Conn, error) {
	if t.session != nil {
		return t.session.Dial(ctx, port)
	}
	c, err := vsock.DialContext(ctx, vsock.Host, port, nil)
	if err != nil {
		return nil, fmt.Errorf("transport: dial host vsock port %d: %w", port, err)
	}
	return c, nil
}

// Done is closed when the transport can no longer carry connections (the
// multiplexer session ended); nil for vsock, which has no session.
func (t *Transport) Done() <-chan struct{} {
	if t.session != nil {
		return t.session.Done()
	}
	return nil
}

// Close ends the transport and every connection carried by it.
func (t *Transport) Close() error {
	if t.session != nil {
		err := t.session.Close()
		t.port.Close()
		return err
	}
	return nil
}
