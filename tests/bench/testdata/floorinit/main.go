//go:build linux

// Command floorinit is the boot floor for the benchmarks in tests/bench: a
// trivial /init that does only what readiness needs (mount /proc, /sys and
// /dev, load the transport's modules, open the transport) and announces
// itself on api.PortReady exactly as the agent does. It then serves a few
// raw transport ports the benchmarks use as baselines:
//
//	PortEcho    echoes every byte back (transport round trip)
//	PortSource  reads an 8-byte big-endian count, writes that many zero bytes, closes
//	PortStatus  writes /proc/self/status and closes (RSS of a minimal Go mux process)
//
// It never exits (PID 1 must not); on error it powers the VM off.
package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/guest/api"
	"github.com/airlock-sandbox/airlock/guest/devices"
	"github.com/airlock-sandbox/airlock/guest/transport"
)

// Ports of the raw baselines; keep in step with tests/bench/floor_test.go.
const (
	PortEcho   uint32 = 5000
	PortSource uint32 = 5001
	PortStatus uint32 = 5002
)

// transportModules are the modules the transports need, by name.
var transportModules = map[string]bool{
	"virtio_pci_legacy_dev": true, "virtio_pci_modern_dev": true, "virtio_ring": true,
	"virtio": true, "virtio_pci": true, "virtio_mmio": true, "virtio_console": true,
	"vsock": true, "vmw_vsock_virtio_transport_common": true, "vmw_vsock_virtio_transport": true,
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "floorinit:", err)
		unix.Sync()
		_ = unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	}
	select {}
}

func run() error {
	for _, m := range [][3]string{{"proc", "/proc", "proc"}, {"sysfs", "/sys", "sysfs"}, {"devtmpfs", "/dev", "devtmpfs"}} {
		_ = os.MkdirAll(m[1], 0o755)
		if err := unix.Mount(m[0], m[1], m[2], 0, ""); err != nil && !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("mount %s: %w", m[1], err)
		}
	}
	b, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return err
	}
	cfg, err := api.ParseCmdline(string(b))
	if err != nil {
		return err
	}
	if cfg.Transport == "" {
		cfg.Transport = api.TransportVsock
	}
	loadModules(string(b))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr, err := transport.Open(ctx, cfg.Transport, transport.Options{})
	if err != nil {
		return err
	}
	for port, serve := range map[uint32]func(net.Conn){PortEcho: echo, PortSource: source, PortStatus: status} {
		l, err := tr.Listen(port)
		if err != nil {
			return err
		}
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				go func() { defer c.Close(); serve(c) }()
			}
		}()
	}
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts)
	up := time.Duration(ts.Nano())
	for attempt := range 20 {
		if attempt > 0 {
			time.Sleep(50 * time.Millisecond)
		}
		c, err := tr.DialHost(ctx, api.PortReady)
		if err != nil {
			continue
		}
		err = api.WriteReady(c, api.Ready{AgentVersion: "floor", BootMillis: up.Milliseconds()})
		c.Close()
		if err == nil {
			return nil
		}
	}
	return errors.New("could not announce readiness")
}

// loadModules loads the transports' modules the VM has a device for,
// skipping the others as init does (devices.Absent).
func loadModules(cmdline string) {
	b, err := os.ReadFile("/lib/modules/airlock.load")
	if err != nil {
		return
	}
	for _, p := range strings.Fields(string(b)) {
		name := strings.TrimSuffix(path.Base(p), ".ko")
		if !transportModules[name] || devices.Absent(name, cmdline) != "" {
			continue
		}
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		if err := unix.FinitModule(int(f.Fd()), "", 0); err != nil && !errors.Is(err, unix.EEXIST) {
			fmt.Fprintln(os.Stderr, "floorinit: module", name, err)
		}
		f.Close()
	}
}

func echo(c net.Conn) { io.Copy(c, c) }

func source(c net.Conn) {
	var n [8]byte
	if _, err := io.ReadFull(c, n[:]); err != nil {
		return
	}
	buf := make([]byte, 256<<10)
	for left := int64(binary.BigEndian.Uint64(n[:])); left > 0; {
		w, err := c.Write(buf[:min(left, int64(len(buf)))])
		if err != nil {
			return
		}
		left -= int64(w)
	}
}

func status(c net.Conn) {
	b, _ := os.ReadFile("/proc/self/status")
	c.Write(b)
}
