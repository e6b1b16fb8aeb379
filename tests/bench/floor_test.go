//go:build e2e

package bench

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/guest/api"
	"github.com/airlock-sandbox/airlock/images/manifest"
	"github.com/airlock-sandbox/airlock/vm"
	"github.com/airlock-sandbox/airlock/vm/qemu"
)

// Ports of testdata/floorinit.
const (
	portEcho   uint32 = 5000
	portSource uint32 = 5001
	portStatus uint32 = 5002
)

// buildGuest cross-compiles a guest program the way the image builder
// builds the agent.
func buildGuest(pkg, dst string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -buildid=", "-o", dst, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if runtime.GOARCH == "amd64" {
		cmd.Env = append(cmd.Env, "GOAMD64=v1")
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s: %v\n%s", pkg, err, out)
	}
	return nil
}

// floorInitramfs writes the image's initramfs with a second newc archive
// appended that replaces /init with testdata/floorinit: the same kernel,
// the same bytes to unpack (plus the small init), a trivial PID 1. The
// kernel unpacks concatenated archives in order, later members replacing
// earlier ones.
func floorInitramfs(orig, initBin, dst string) error {
	in, err := os.Open(orig)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer out.Close()
	n, err := io.Copy(out, in)
	if err != nil {
		return err
	}
	if pad := (4 - n%4) % 4; pad != 0 {
		out.Write(make([]byte, pad))
	}
	data, err := os.ReadFile(initBin)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	member := func(ino uint32, name string, mode uint32, data []byte) {
		fmt.Fprintf(&buf, "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
			ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
		buf.WriteString(name)
		buf.WriteByte(0)
		for buf.Len()%4 != 0 {
			buf.WriteByte(0)
		}
		buf.Write(data)
		for buf.Len()%4 != 0 {
			buf.WriteByte(0)
		}
	}
	member(1, "init", 0o100755, data)
	member(2, "TRAILER!!!", 0, nil)
	for buf.Len()%512 != 0 {
		buf.WriteByte(0)
	}
	_, err = out.Write(buf.Bytes())
	return err
}

// booted is a machine that has announced readiness.
type booted struct {
	m       *qemu.Machine
	elapsed time.Duration // m.Start to the readiness message
	ready   api.Ready
}

// boot starts a machine for cfg and waits for its readiness message the way
// app/sandbox does (listen on PortReady before the start, never poll). A
// boot is a boot: without opts.Templates the machine does not start from a
// template, nor park for one (the trivial init never parks).
func boot(ctx context.Context, cfg vm.Config, opts qemu.Options) (*booted, error) {
	if opts.Templates == "" {
		opts.Templates = qemu.TemplatesOff
	}
	m, err := qemu.New(cfg, opts)
	if err != nil {
		return nil, err
	}
	l, err := m.Listen(api.PortReady)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	type res struct {
		r   api.Ready
		err error
	}
	got := make(chan res, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			got <- res{err: err}
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		r, err := api.ReadReady(c)
		got <- res{r, err}
	}()
	start := time.Now()
	if err := m.Start(ctx); err != nil {
		return nil, err
	}
	select {
	case r := <-got:
		if r.err != nil {
			m.Stop(context.Background())
			return nil, r.err
		}
		return &booted{m: m, elapsed: time.Since(start), ready: r.r}, nil
	case <-time.After(3 * time.Minute):
		con, _ := os.ReadFile(cfg.ConsoleLog)
		m.Stop(context.Background())
		return nil, fmt.Errorf("no readiness in 3 minutes; console:\n%s", tail(con, 3000))
	}
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// floorVM is a running floor guest; its ports are the raw transport.
type floorVM struct {
	*booted
	echo net.Conn
}

// echoRTT times n one-byte round trips through the floor's echo port, in µs
// (median).
func (f *floorVM) echoRTT(b *testing.B, n int) float64 {
	if f.echo == nil {
		c, err := f.m.Dial(context.Background(), portEcho)
		if err != nil {
			b.Fatal(err)
		}
		f.echo = c
	}
	var one [1]byte
	ts := make([]float64, 0, n)
	for range n {
		start := time.Now()
		if _, err := f.echo.Write(one[:]); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(f.echo, one[:]); err != nil {
			b.Fatal(err)
		}
		ts = append(ts, float64(time.Since(start).Microseconds()))
	}
	return median(ts)
}

// source reads size bytes the guest writes on a fresh connection, in MiB/s
// from the dial to the last byte.
func (f *floorVM) source(b *testing.B, size int64) float64 {
	start := time.Now()
	c, err := f.m.Dial(context.Background(), portSource)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	binary.Write(c, binary.BigEndian, uint64(size))
	n, err := io.Copy(io.Discard, c)
	if err != nil || n != size {
		b.Fatalf("floor source: %d bytes, %v", n, err)
	}
	return mibps(size, time.Since(start))
}

// rssKiB is VmRSS of the floor init (a minimal Go program on the mux).
func (f *floorVM) rssKiB(b *testing.B) float64 {
	c, err := f.m.Dial(context.Background(), portStatus)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	st, _ := io.ReadAll(c)
	for _, l := range strings.Split(string(st), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			var n float64
			fmt.Sscan(strings.TrimSpace(v), &n)
			return n
		}
	}
	return -1
}

// kernelHZ is the timer rate of the image kernel belongs to, as the
// sandbox passes it (vm.Config.KernelHZ): from the manifest beside kernel,
// else from the one in dflt (a kernel made from the image's own, such as
// the bzImage choice); 0 when neither says.
func kernelHZ(kernel, dflt string) int {
	for _, dir := range []string{filepath.Dir(kernel), dflt} {
		if m, err := manifest.Load(dir); err == nil {
			return m.KernelHZ
		}
	}
	return 0
}

// machineConfig is the VM both the floor and the agent boot in: the
// sandbox's defaults, with the workspace shared.
func (h *harness) machineConfig(name, initrd, ws string, uid, gid uint32) vm.Config {
	dir := filepath.Join(h.work, name)
	os.MkdirAll(dir, 0o700)
	kernel := filepath.Join(h.imageDir, "vmlinux")
	return vm.Config{
		Kernel: kernel, Initrd: initrd, KernelHZ: kernelHZ(kernel, h.imageDir),
		Cmdline: api.BootConfig{UID: uid, GID: gid}.Args(),
		CPUs:    2, MemoryMiB: 1024, Dir: dir, ConsoleLog: filepath.Join(dir, "console.log"),
		Share: &vm.Share{HostPath: ws},
	}
}
