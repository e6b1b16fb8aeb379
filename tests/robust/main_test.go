//go:build e2e

// Package robust proves that the host holds against a hostile guest, faults
// and load (issue 8, points 2 to 4), with real VMs:
//
//   - hostile_test.go boots the real kernel and init with a guest agent
//     that attacks the host (hostileagent/, packed as /init into a copy of
//     the real initramfs) and drives it through the real host service;
//   - faults_test.go breaks a running `airlock serve` (QEMU killed, the
//     agent killed, the VM frozen, the service killed, the log folder full,
//     the workspace deleted) and checks that states are truthful, nothing
//     received is lost and the next task works;
//   - load_test.go runs 64 large tasks and 200 downloads through the gate
//     at once, byte-exact, within a memory bound of the service process.
package robust

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/app/sandbox"
	"github.com/airlock-sandbox/airlock/tests/internal/vmharness"
)

var (
	airlockBin string        // the CLI under test
	imageRoot  string        // images/out
	realImage  sandbox.Image // the verified guest image
	hostileImg sandbox.Image // the same kernel, with hostileagent as /init
	scratch    string        // removed after the run
	logLevel   = slog.LevelWarn
)

func TestMain(m *testing.M) { os.Exit(runMain(m)) }

func runMain(m *testing.M) int {
	env, err := vmharness.FromEnv("robust")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	airlockBin, imageRoot, realImage = env.Bin, env.ImageRoot, env.Image
	if scratch, err = os.MkdirTemp("", "airlock-robust-"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(scratch)
	if hostileImg, err = buildHostileImage(realImage, filepath.Join(scratch, "hostile")); err != nil {
		fmt.Fprintln(os.Stderr, "robust: hostile image:", err)
		return 1
	}
	return m.Run()
}

// buildHostileImage builds hostileagent for the guest and appends it as
// /init to a copy of the real initramfs: the kernel unpacks concatenated
// cpio archives in order, so the later /init replaces the real one and
// everything else (busybox, modules, /etc) stays as shipped.
func buildHostileImage(real sandbox.Image, dir string) (sandbox.Image, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return sandbox.Image{}, err
	}
	bin := filepath.Join(dir, "hostileagent")
	if err := vmharness.BuildGuest("hostileagent", bin); err != nil {
		return sandbox.Image{}, err
	}
	agent, err := os.ReadFile(bin)
	if err != nil {
		return sandbox.Image{}, err
	}
	initrd, err := os.ReadFile(real.Initrd)
	if err != nil {
		return sandbox.Image{}, err
	}
	var b bytes.Buffer
	b.Write(initrd)
	for b.Len()%4 != 0 {
		b.WriteByte(0)
	}
	writeNewc(&b, "init", 0o100755, agent)
	writeNewc(&b, "TRAILER!!!", 0, nil)
	out := filepath.Join(dir, "initramfs.cpio")
	if err := os.WriteFile(out, b.Bytes(), 0o644); err != nil {
		return sandbox.Image{}, err
	}
	return sandbox.Image{Dir: dir, Kernel: real.Kernel, Initrd: out}, nil
}

// writeNewc writes one member of a "newc" cpio archive.
func writeNewc(w *bytes.Buffer, name string, mode uint32, data []byte) {
	fields := []uint32{1, mode, 0, 0, 1, 0, uint32(len(data)), 0, 0, 0, 0, uint32(len(name) + 1), 0}
	w.WriteString("070701")
	for _, f := range fields {
		fmt.Fprintf(w, "%08X", f)
	}
	w.WriteString(name)
	w.WriteByte(0)
	for w.Len()%4 != 0 {
		w.WriteByte(0)
	}
	w.Write(data)
	for w.Len()%4 != 0 {
		w.WriteByte(0)
	}
}

// testLogger writes the host's warnings to the test log and keeps them for
// assertions.
type testLogger struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *testLogger) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	os.Stderr.Write(p)
	return l.buf.Write(p)
}

func (l *testLogger) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func (l *testLogger) slog() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: logLevel}))
}

// memWatch samples this process's Go heap while it runs; with a pid it
// reads that process's resident set instead. Peaks are what the tests
// bound.
type memWatch struct {
	pid       int
	stop      chan struct{}
	done      chan struct{}
	mu        sync.Mutex
	peakHeap  uint64 // bytes in use by Go objects, this process
	phaseHeap uint64 // the same since the last mark
	peakRSS   uint64 // VmHWM, kB→bytes
}

func watchMemory(pid int) *memWatch {
	w := &memWatch{pid: pid, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			w.sample()
			select {
			case <-w.stop:
				w.sample()
				return
			case <-t.C:
			}
		}
	}()
	return w
}

func (w *memWatch) sample() {
	var heap uint64
	if w.pid == 0 {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		heap = ms.HeapInuse
	}
	rss := peakRSS(w.pid)
	w.mu.Lock()
	defer w.mu.Unlock()
	w.peakHeap, w.phaseHeap, w.peakRSS = max(w.peakHeap, heap), max(w.phaseHeap, heap), max(w.peakRSS, rss)
}

// mark logs the heap peak since the previous mark.
func (w *memWatch) mark(t *testing.T, phase string) {
	t.Helper()
	w.mu.Lock()
	p := w.phaseHeap
	w.phaseHeap = 0
	w.mu.Unlock()
	t.Logf("peak Go heap during %s: %s", phase, mib(p))
}

// end stops sampling and returns the peaks.
func (w *memWatch) end() (heap, rss uint64) {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.peakHeap, w.peakRSS
}

// peakRSS is VmHWM (the peak resident set) of pid, or of this process for 0.
func peakRSS(pid int) uint64 {
	p := "/proc/self/status"
	if pid != 0 {
		p = "/proc/" + strconv.Itoa(pid) + "/status"
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				n, _ := strconv.ParseUint(f[0], 10, 64)
				return n << 10
			}
		}
	}
	return 0
}

func mib(n uint64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// deterministic returns n bytes of a stream both sides can compute.
func deterministic(seed uint64, n int) []byte {
	out := make([]byte, n)
	x := seed*0x9E3779B97F4A7C15 + 1
	for i := 0; i < n; i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], x)
		copy(out[i:], b[:])
	}
	return out
}

// readAll reads a task's whole log through read (offset → chunks, next).
func readAll(read func(off int64) ([][]byte, int64, error)) ([]byte, error) {
	var b bytes.Buffer
	for off := int64(0); ; {
		chunks, next, err := read(off)
		if err != nil {
			return b.Bytes(), err
		}
		if len(chunks) == 0 {
			return b.Bytes(), nil
		}
		for _, c := range chunks {
			b.Write(c)
		}
		off = next
	}
}
