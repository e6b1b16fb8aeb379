package qemu

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/guest/api"
	"github.com/airlock-sandbox/airlock/guest/mux"
	"github.com/airlock-sandbox/airlock/internal/leakcheck"
	"github.com/airlock-sandbox/airlock/vm"
)

// TestNewTransport: vhost-vsock when the host has it, else the
// multiplexer on a virtio-serial port; either puts its device on QEMU's
// command line and tells the guest which it is.
func TestNewTransport(t *testing.T) {
	for _, tc := range []struct {
		name    string
		vhost   bool
		kind    api.Transport
		files   int
		device  string
		absent  string
		guestIs string
	}{
		{"vhost-vsock", true, api.TransportVsock, 0, "vhost-vsock-pci,guest-cid=", "virtserialport", "airlock.transport=vsock"},
		{"no vhost-vsock", false, api.TransportSerial, 1, "socket,id=mux,fd=3", "vhost-vsock", "airlock.transport=serial"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := newTransport(tc.vhost)
			if err != nil {
				t.Fatal(err)
			}
			defer tr.close()
			if got := tr.kind(); got != tc.kind {
				t.Errorf("kind %q, want %q", got, tc.kind)
			}
			if got := len(tr.files()); got != tc.files {
				t.Errorf("%d files for QEMU, want %d", got, tc.files)
			}
			p := plan{Arch: "x86_64", Accel: "tcg", Kernel: "/k", Initrd: "/i", CPUs: 1, MemoryMiB: 256, Machine: MachineQ35}
			tr.configure(&p)
			args := strings.Join(p.args(), " ")
			if !strings.Contains(args, tc.device) || strings.Contains(args, tc.absent) {
				t.Errorf("args %s: want %q and no %q", args, tc.device, tc.absent)
			}
			if !strings.Contains(args, tc.guestIs) {
				t.Errorf("args %s: the guest is not told %q", args, tc.guestIs)
			}
			if v, ok := tr.(*vsockTransport); ok && (v.cid < 3 || v.cid == ^uint32(0) || p.CID != v.cid) {
				t.Errorf("context id %d, on the command line %d", v.cid, p.CID)
			}
			tr.committed()
			if got := len(tr.files()); got != 0 {
				t.Errorf("%d files for QEMU once committed, want none", got)
			}
		})
	}
}

// TestMuxTransport: the multiplexer's streams run both ways once begun,
// and its errors are vm's: a port nobody listens on refuses, a port
// listened on twice is in use.
func TestMuxTransport(t *testing.T) {
	leakcheck.Goroutines(t)
	tr, err := newMuxTransport()
	if err != nil {
		t.Fatal(err)
	}
	child := tr.files()[0]
	guestConn, err := net.FileConn(child)
	if err != nil {
		t.Fatal(err)
	}
	tr.committed() // the guest's end has its own descriptor now
	guest := mux.Server(guestConn, mux.GuestConfig())
	defer guest.Close()
	defer tr.close()

	hostL, err := tr.listen(api.PortReady)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tr.listen(api.PortReady); !errors.Is(err, vm.ErrPortInUse) {
		t.Errorf("a second listen on a port: %v, want %v", err, vm.ErrPortInUse)
	}
	guestL, err := guest.Listen(api.PortAgent)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := guestL.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	tr.begin()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := tr.dial(ctx, api.PortAgent)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Errorf("echo %q, %v", buf, err)
	}
	c.Close()

	if _, err := tr.dial(ctx, api.PortExec); !errors.Is(err, vm.ErrConnRefused) {
		t.Errorf("dial a port the guest does not listen on: %v, want %v", err, vm.ErrConnRefused)
	}

	gc, err := guest.Dial(ctx, api.PortReady)
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	hc, err := hostL.Accept()
	if err != nil {
		t.Fatal(err)
	}
	hc.Close()

	tr.close()
	if _, err := tr.dial(ctx, api.PortAgent); err == nil {
		t.Error("dial after close succeeded")
	}
}
