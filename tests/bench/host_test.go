//go:build e2e

package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/app/egress"
	"github.com/airlock-sandbox/airlock/app/sandbox"
	"github.com/airlock-sandbox/airlock/guest/mux"
	"github.com/airlock-sandbox/airlock/internal/relaytest"
	"github.com/airlock-sandbox/airlock/tests/internal/vmharness"
)

// harness holds what the phases share.
type harness struct {
	b        *testing.B
	t        *table
	rounds   int
	accel    string
	cleanups []func()

	imageDir  string // the minimal image the product boots here (sandbox.ImageDirUnder)
	debianDir string // images/out/<arch>: Debian's kernel and modules (the choices phase)
	work      string // scratch folder, removed at the end
	floor     *floorVM
	echoRTT   []float64 // per-round medians, µs (the transport's own echo)
	rawSource []float64 // MiB/s guest→host on the raw transport
	// direct is the bench's sandbox, kept for the service phase: its load
	// runs the same tasks on this agent directly, alternating with the
	// service's.
	direct *guest
}

func (h *harness) cleanup() {
	for i := len(h.cleanups) - 1; i >= 0; i-- {
		h.cleanups[i]()
	}
}

func (h *harness) logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", a...)
}

func (h *harness) run() {
	h.imageDir, h.debianDir = imageDir(h.b)
	h.logf("image %s", h.imageDir)
	var err error
	if h.work, err = os.MkdirTemp("", "airlock-bench-"); err != nil {
		h.b.Fatal(err)
	}
	h.cleanups = append(h.cleanups, func() { os.RemoveAll(h.work) })

	if want("host") {
		h.hostOnly()
	}
	if want("choices") {
		h.choices()
	}
	if slices.ContainsFunc(phases, func(p string) bool {
		return p != "host" && p != "sizes" && p != "choices" && p != "changes" && want(p)
	}) {
		h.guestPhases()
	}
	if want("changes") {
		h.changes()
	}
	if want("service") {
		h.service()
	}
	if want("sizes") {
		h.sizes()
	}
}

// imageDir finds the minimal image the product boots here (on a Linux amd64
// host the one with the kernel built from linux-source, when it was
// built) and the one with Debian's kernel.
func imageDir(b *testing.B) (product, debian string) {
	root := os.Getenv("AIRLOCK_IMAGE_DIR")
	if root == "" {
		root = filepath.Join("..", "..", "images", "out")
	}
	root, _ = filepath.Abs(root)
	product, debian = sandbox.ImageDirUnder(root, sandbox.DefaultImage, runtime.GOARCH), filepath.Join(root, runtime.GOARCH)
	for _, dir := range []string{product, debian} {
		if _, err := os.Stat(filepath.Join(dir, "manifest.json")); err != nil {
			b.Fatalf("no guest image in %s (make image; make bench builds it): %v", dir, err)
		}
	}
	return product, debian
}

// hostOnly measures what needs no VM: the multiplexer against a bare
// socketpair, and the gate on loopback against a direct connection.
func (h *harness) hostOnly() {
	const size = 64 << 20
	var muxR, rawR []float64
	for i := range 3 * h.rounds { // ~30 ms a transfer: more rounds cost little
		m, r := muxVsRaw(h.b, size, i%2 == 1)
		muxR, rawR = append(muxR, m), append(rawR, r)
	}
	h.t.add("mux-stream", "mux: one stream over a socketpair", "MiB/s", muxR, "bare socketpair", rawR, atLeast(0.9))

	o := newOrigin(h.b, size)
	defer o.close()
	g, err := egress.New(egress.Config{Allow: []string{"origin.test"}, MapHosts: []string{"origin.test=127.0.0.1"}})
	if err != nil {
		h.b.Fatal(err)
	}
	defer g.Close()
	hl, _ := net.Listen("tcp", "127.0.0.1:0")
	sl, _ := net.Listen("tcp", "127.0.0.1:0")
	go g.ServeHTTPProxy(hl)
	go g.ServeSOCKS(sl)
	defer hl.Close()
	defer sl.Close()
	rl := relaytest.Bare(h.b, o.l.Addr().String(), false)
	defer rl.Close()
	port := o.l.Addr().(*net.TCPAddr).Port
	dial := func(addr string) func() (net.Conn, io.Reader, error) {
		return func() (net.Conn, io.Reader, error) {
			c, err := net.Dial("tcp", addr)
			return c, c, err
		}
	}
	connect := func() (net.Conn, io.Reader, error) {
		c, err := net.Dial("tcp", hl.Addr().String())
		if err != nil {
			return nil, nil, err
		}
		fmt.Fprintf(c, "CONNECT origin.test:%d HTTP/1.1\r\n\r\n", port)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil || resp.StatusCode != 200 {
			c.Close()
			return nil, nil, fmt.Errorf("CONNECT: %v %v", resp, err)
		}
		return c, br, nil
	}
	socks := func() (net.Conn, io.Reader, error) {
		c, err := net.Dial("tcp", sl.Addr().String())
		if err != nil {
			return nil, nil, err
		}
		req := append([]byte{5, 1, 0, 5, 1, 0, 3, 11}, "origin.test"...)
		c.Write(append(req, byte(port>>8), byte(port)))
		reply := make([]byte, 12)
		if _, err := io.ReadFull(c, reply); err != nil || reply[3] != 0 {
			c.Close()
			return nil, nil, fmt.Errorf("SOCKS: %x %v", reply, err)
		}
		return c, c, nil
	}
	fetch := func(open func() (net.Conn, io.Reader, error)) float64 {
		start := time.Now()
		c, r, err := open()
		if err != nil {
			h.b.Fatal(err)
		}
		n, err := io.Copy(io.Discard, r)
		c.Close()
		if err != nil || n != size {
			h.b.Fatalf("read %d bytes: %v", n, err)
		}
		return mibps(size, time.Since(start))
	}
	// The same client code and size for all four, alternating, each
	// round starting with the next one so none is always first; four times
	// the rounds of the other rows, since a relay's rate swings with the
	// machine's load more than a direct connection's.
	kinds := []func() (net.Conn, io.Reader, error){dial(o.l.Addr().String()), dial(rl.Addr().String()), connect, socks}
	rates := make([][]float64, len(kinds))
	for i := range h.rounds * 4 {
		for j := range kinds {
			k := (i + j) % len(kinds)
			rates[k] = append(rates[k], fetch(kinds[k]))
		}
	}
	d, rr, cn, sk := rates[0], rates[1], rates[2], rates[3]
	h.t.add("gate-loopback-connect", "gate on loopback: HTTP CONNECT", "MiB/s", cn, "direct TCP", d, atLeast(0.8))
	h.t.add("gate-loopback-socks", "gate on loopback: SOCKS5", "MiB/s", sk, "direct TCP", d, atLeast(0.8))
	h.t.add("relay-loopback", "bare relay on loopback (a proxy's floor)", "MiB/s", rr, "direct TCP", d, nil).Note =
		"accept, dial, copy both ways in 256 KiB steps: a relay is a third party busy on the same cores as the two ends"
	h.t.add("gate-loopback-connect-relay", "gate on loopback: HTTP CONNECT", "MiB/s", cn, "bare relay", rr, atLeast(0.9))
	h.t.add("gate-loopback-socks-relay", "gate on loopback: SOCKS5", "MiB/s", sk, "bare relay", rr, atLeast(0.9))
}

func mibps(n int64, d time.Duration) float64 { return float64(n) / (1 << 20) / d.Seconds() }

// muxVsRaw moves size bytes over one mux stream on a unix socketpair and
// over a bare socketpair, in MiB/s. The sessions have the product's windows
// (vm/qemu's on the host, guest/transport's in the guest): 1 MiB each way on
// a stream the host opens. rawFirst swaps the order: the second transfer of
// a pair runs on a warmer cache and a busier scheduler.
func muxVsRaw(b *testing.B, size int64, rawFirst bool) (muxRate, rawRate float64) {
	buf := make([]byte, 64<<10)
	transfer := func(w io.Writer, r io.Reader) time.Duration {
		start := time.Now()
		done := make(chan struct{})
		go func() { io.CopyN(io.Discard, r, size); close(done) }()
		for sent := int64(0); sent < size; sent += int64(len(buf)) {
			w.Write(buf)
		}
		<-done
		return time.Since(start)
	}
	a, c := socketPair(b)
	host := mux.Client(a, mux.HostConfig())
	guest := mux.Server(c, mux.GuestConfig())
	defer host.Close()
	defer guest.Close()
	ln, _ := guest.Listen(1)
	accepted := make(chan net.Conn, 1)
	go func() { conn, _ := ln.Accept(); accepted <- conn }()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	w, err := host.Dial(ctx, 1)
	if err != nil {
		b.Fatal(err)
	}
	r := <-accepted
	rw, rr := socketPair(b)
	defer rw.Close()
	defer rr.Close()
	if rawFirst {
		rawRate = mibps(size, transfer(rw, rr))
	}
	muxRate = mibps(size, transfer(w, r))
	if !rawFirst {
		rawRate = mibps(size, transfer(rw, rr))
	}
	return
}

func socketPair(b *testing.B) (net.Conn, net.Conn) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		b.Fatal(err)
	}
	conn := func(fd int) net.Conn {
		f := os.NewFile(uintptr(fd), "socketpair")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
	return conn(fds[0]), conn(fds[1])
}

// origin is a loopback TCP server that sends size bytes to every connection.
type origin struct{ l net.Listener }

func newOrigin(b *testing.B, size int64) *origin {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	chunk := make([]byte, 1<<20)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				for sent := int64(0); sent < size; sent += int64(len(chunk)) {
					if _, err := c.Write(chunk[:min(int64(len(chunk)), size-sent)]); err != nil {
						return
					}
				}
			}()
		}
	}()
	return &origin{l}
}

func (o *origin) close() { o.l.Close() }

// vmRSS is VmRSS of pid in KiB.
func vmRSS(pid int) float64 {
	kib, err := vmharness.ResidentKiB(pid)
	if err != nil {
		return -1
	}
	return float64(kib)
}

func fileSizeMiB(p string) float64 {
	fi, err := os.Stat(p)
	if err != nil {
		return -1
	}
	return float64(fi.Size()) / (1 << 20)
}

// sizes: the image and the binaries.
func (h *harness) sizes() {
	for _, f := range []struct{ key, name, path string }{
		{"size-vmlinux", "size: vmlinux (uncompressed PVH kernel)", filepath.Join(h.imageDir, "vmlinux")},
		{"size-initramfs", "size: initramfs.cpio (uncompressed)", filepath.Join(h.imageDir, "initramfs.cpio")},
		{"size-airlock", "size: bin/airlock", airlockBin()},
	} {
		h.t.add(f.key, f.name, "MiB", []float64{fileSizeMiB(f.path)}, "", nil, nil)
	}
}

func airlockBin() string {
	if p := os.Getenv("AIRLOCK_BENCH_BIN"); p != "" {
		return p
	}
	p, _ := filepath.Abs(filepath.Join("..", "..", "bin", "airlock"))
	return p
}

// cpuTime is the CPU time process pid has used so far: the sum of its
// threads' run time from schedstat, in nanoseconds (stat's utime and stime
// count 10 ms ticks, too coarse for an idle process). A thread that ended
// takes its time with it: QEMU's and Go's threads of an idle process stay.
func cpuTime(pid int) time.Duration {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	var sum time.Duration
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "schedstat"))
		if err != nil {
			continue
		}
		f := strings.Fields(string(b))
		if len(f) > 0 {
			n, _ := strconv.ParseInt(f[0], 10, 64)
			sum += time.Duration(n)
		}
	}
	return sum
}

// idleCPU samples the processes of each group over the same window d and
// returns each group's CPU use in percent of one host core.
func idleCPU(d time.Duration, groups ...[]int) []float64 {
	sum := func(pids []int) (t time.Duration) {
		for _, p := range pids {
			t += cpuTime(p)
		}
		return t
	}
	before := make([]time.Duration, len(groups))
	for i, g := range groups {
		before[i] = sum(g)
	}
	start := time.Now()
	time.Sleep(d)
	elapsed := time.Since(start)
	pct := make([]float64, len(groups))
	for i, g := range groups {
		pct[i] = 100 * float64(sum(g)-before[i]) / float64(elapsed)
	}
	return pct
}
