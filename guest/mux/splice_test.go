//go:build linux

package mux

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/leakcheck"
)

// socketFiles returns the ends of a unix socketpair: the host's as a
// net.Conn, the guest's as a non-blocking *os.File like the guest's port
// (a file, not a net.Conn, in the runtime's poller).
func socketFiles(t *testing.T) (net.Conn, *os.File) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		if err := unix.SetNonblock(fd, true); err != nil {
			t.Fatal(err)
		}
	}
	hf := os.NewFile(uintptr(fds[0]), "host")
	defer hf.Close()
	h, err := net.FileConn(hf)
	if err != nil {
		t.Fatal(err)
	}
	return h, os.NewFile(uintptr(fds[1]), "guest")
}

// splicePair starts a host Client and a guest Server with Splice over
// guest (socketFiles' or a wrapper of it), and returns the guest's end of a
// stream the host dialled.
func splicePair(t *testing.T, host net.Conn, guest io.ReadWriteCloser) (hs, gs *Session, hc, gc net.Conn) {
	t.Helper()
	hs, gs = Client(host, Config{}), Server(guest, Config{Splice: true})
	t.Cleanup(func() {
		hs.Close()
		gs.Close()
	})
	l, err := gs.Listen(7)
	if err != nil {
		t.Fatal(err)
	}
	hc, err = hs.Dial(ctxT(t, 10*time.Second), 7)
	if err != nil {
		t.Fatal(err)
	}
	if gc, err = l.Accept(); err != nil {
		t.Fatal(err)
	}
	return hs, gs, hc, gc
}

// filledPipe returns a pipe's ends, its read end non-blocking in the
// poller (like a task's output pipe in the agent), holding data.
func filledPipe(t *testing.T, data []byte) (r, w *os.File) {
	t.Helper()
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.FcntlInt(uintptr(p[0]), unix.F_SETPIPE_SZ, 1<<20); err != nil {
		t.Fatal(err)
	}
	r, w = os.NewFile(uintptr(p[0]), "r"), os.NewFile(uintptr(p[1]), "w")
	t.Cleanup(func() {
		r.Close()
		w.Close()
	})
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	return r, w
}

func rawConn(t *testing.T, f *os.File) syscall.RawConn {
	t.Helper()
	rc, err := f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

// spliceData is n bytes that show where a byte went missing.
func spliceData(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i>>8)
	}
	return b
}

// writePipe calls WritePipe with a head that says how much follows it.
func writePipe(c net.Conn, pipe syscall.RawConn, avail int) (int, []byte, error) {
	head := make([]byte, 8)
	n, err := c.(PipeWriter).WritePipe(head, func(n int) { copy(head, fmt.Sprintf("%08d", n)) }, pipe, avail)
	return n, head, err
}

// TestWritePipe: frames of a head and spliced bytes arrive whole, in
// order, never beyond the stream's credit: the host (which checks credit
// and ends the session on a violation) reads them all.
func TestWritePipe(t *testing.T) {
	leakcheck.Goroutines(t)
	h, g := socketFiles(t)
	_, gs, hc, gc := splicePair(t, h, g)
	data := spliceData(700 << 10) // beyond the 256 KiB window
	r, _ := filledPipe(t, data)
	rc := rawConn(t, r)

	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(hc)
		got <- b
	}()
	if n, _, err := writePipe(gc, rc, 0); n != 0 || err != nil {
		t.Fatalf("WritePipe of nothing = %d, %v; want 0, nil (it can splice)", n, err)
	}
	var want []byte
	left := len(data)
	for left > 0 {
		n, head, err := writePipe(gc, rc, left)
		if err != nil {
			t.Fatalf("WritePipe with %d left: %v", left, err)
		}
		if n <= 0 || n > left || n+len(head) > minWindow {
			t.Fatalf("WritePipe sent %d bytes with %d left; the window is %d", n, left, minWindow)
		}
		if string(head) != fmt.Sprintf("%08d", n) {
			t.Fatalf("head %q for %d bytes", head, n)
		}
		off := len(data) - left
		want = append(append(want, head...), data[off:off+n]...)
		left -= n
	}
	// A plain Write follows in order.
	if _, err := gc.Write([]byte("end")); err != nil {
		t.Fatal(err)
	}
	want = append(want, "end"...)
	gc.Close()
	if b := <-got; !bytes.Equal(b, want) {
		t.Fatalf("host read %d bytes, want %d (equal prefix %d)", len(b), len(want), commonPrefix(b, want))
	}
	if gs.noSplice.Load() {
		t.Fatal("splicing was turned off")
	}
}

func commonPrefix(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

// TestWritePipeWaitsForCredit: with the window used up, WritePipe sends
// nothing until the host reads.
func TestWritePipeWaitsForCredit(t *testing.T) {
	leakcheck.Goroutines(t)
	h, g := socketFiles(t)
	_, _, hc, gc := splicePair(t, h, g)
	data := spliceData(minWindow + 100)
	r, _ := filledPipe(t, data)
	rc := rawConn(t, r)
	n, head, err := writePipe(gc, rc, len(data))
	if err != nil || n != minWindow-len(head) {
		t.Fatalf("first WritePipe = %d, %v; want the whole window, %d", n, err, minWindow-len(head))
	}
	done := make(chan error, 1)
	go func() {
		_, _, err := writePipe(gc, rc, len(data)-n)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("WritePipe without credit returned %v", err)
	case <-time.After(200 * time.Millisecond):
	}
	// Reading half the window returns credit.
	if _, err := io.ReadFull(hc, make([]byte, minWindow/2)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WritePipe did not go on once the host read")
	}
	left := len(data) - n
	rest := make([]byte, minWindow/2+len(head)+left)
	if _, err := io.ReadFull(hc, rest); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(rest[len(rest)-left:], data[n:]) {
		t.Fatal("the last frame's bytes differ")
	}
}

// TestWritePipeCutFrame: a pipe holding less than the caller said cuts the
// frame after its header went out: the session ends, on both sides.
func TestWritePipeCutFrame(t *testing.T) {
	leakcheck.Goroutines(t)
	h, g := socketFiles(t)
	hs, gs, hc, gc := splicePair(t, h, g)
	r, w := filledPipe(t, spliceData(1000))
	w.Close()
	_, _, err := writePipe(gc, rawConn(t, r), 5000)
	if err == nil {
		t.Fatal("WritePipe of 5000 bytes from a pipe holding 1000 succeeded")
	}
	for _, s := range []*Session{gs, hs} {
		select {
		case <-s.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the session goes on after a cut frame")
		}
	}
	if _, err := io.ReadAll(hc); err == nil {
		t.Fatal("the host read the cut stream to a clean end")
	}
	if err := hs.Err(); !errors.Is(err, ErrProtocol) {
		t.Fatalf("host session ended with %v, want a protocol violation", err)
	}
}

// appendConn is the guest's socket end, except that splice(2) goes to a
// file opened O_APPEND, which refuses it (EINVAL).
type appendConn struct {
	*os.File
	app *os.File
}

func (c appendConn) SyscallConn() (syscall.RawConn, error) { return c.app.SyscallConn() }

// TestWritePipeFallback: a connection the kernel cannot splice to gets the
// first frame copied whole; the next WritePipe says unsupported, and so do
// sessions without Splice.
func TestWritePipeFallback(t *testing.T) {
	leakcheck.Goroutines(t)
	app, err := os.OpenFile(t.TempDir()+"/app", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	h, g := socketFiles(t)
	_, gs, hc, gc := splicePair(t, h, appendConn{File: g, app: app})
	data := spliceData(100 << 10)
	r, wp := filledPipe(t, data)
	rc := rawConn(t, r)
	n, head, err := writePipe(gc, rc, len(data))
	if err != nil || n != len(data) {
		t.Fatalf("WritePipe = %d, %v", n, err)
	}
	b := make([]byte, len(head)+n)
	if _, err := io.ReadFull(hc, b); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b[len(head):], data) || string(b[:len(head)]) != string(head) {
		t.Fatal("the copied frame differs")
	}
	if !gs.noSplice.Load() {
		t.Fatal("splicing still on")
	}
	if fi, err := app.Stat(); err != nil || fi.Size() != 0 {
		t.Fatalf("the file that refused splice has %d bytes (%v)", fi.Size(), err)
	}
	if _, err := wp.Write([]byte("more")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := writePipe(gc, rc, 4); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("WritePipe after the fallback = %v, want unsupported", err)
	}

	// Without Splice, or over a socket: unsupported, nothing consumed.
	host, guest := pair(t, "socketpair", Config{Splice: true})
	l, err := guest.Listen(8)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := host.Dial(ctxT(t, 10*time.Second), 8); err != nil {
		t.Fatal(err)
	}
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := writePipe(c, rc, 4); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("WritePipe over a socket = %v, want unsupported", err)
	}
	var v int
	if err := rc.Control(func(fd uintptr) { v, err = unix.IoctlGetInt(int(fd), unix.TIOCINQ) }); err != nil || v != 4 {
		t.Fatalf("the pipe holds %d bytes (%v), want 4", v, err)
	}
}
