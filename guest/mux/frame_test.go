package mux

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"
)

// recorder keeps every Write separately.
type recorder struct{ writes [][]byte }

func (r *recorder) Read([]byte) (int, error) { return 0, io.EOF }
func (r *recorder) Close() error             { return nil }
func (r *recorder) Write(p []byte) (int, error) {
	r.writes = append(r.writes, bytes.Clone(p))
	return len(p), nil
}

func header(typ byte, flags uint16, id, length uint32) []byte {
	h := make([]byte, frameHeaderSize)
	putHeader(h, typ, flags, id, length)
	return h
}

func TestPutJoinsHeaderAndBody(t *testing.T) {
	cat := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
	small := bytes.Repeat([]byte("s"), 100)
	big := bytes.Repeat([]byte("b"), firstWrite+5000)
	update := header(typeControl, 0, 1, 1<<20)
	fin := header(typeControl, flagFIN, 1, 0)
	tests := []struct {
		name            string
		ctrl, hdr, body []byte
		want            [][]byte // as the port sees them
	}{
		{"small frame, one write", nil, header(typeData, 0, 1, 100), small,
			[][]byte{cat(header(typeData, 0, 1, 100), small)}},
		{"big frame: header with the first 32 KiB, then the rest", nil, header(typeData, 0, 1, uint32(len(big))), big,
			[][]byte{cat(header(typeData, 0, 1, uint32(len(big))), big[:firstWrite-frameHeaderSize]), big[firstWrite-frameHeaderSize:]}},
		{"control frames go with the data", cat(update, fin), header(typeData, 0, 3, 100), small,
			[][]byte{cat(update, fin, header(typeData, 0, 3, 100), small)}},
		{"control frames alone", cat(update, fin), nil, nil, [][]byte{cat(update, fin)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r recorder
			s := &Session{conn: &r}
			if err := s.put(tt.ctrl, tt.hdr, tt.body); err != nil {
				t.Fatal(err)
			}
			if len(r.writes) != len(tt.want) {
				t.Fatalf("%d writes, want %d", len(r.writes), len(tt.want))
			}
			for i := range tt.want {
				if !bytes.Equal(r.writes[i], tt.want[i]) {
					t.Errorf("write %d: %d bytes, want %d", i, len(r.writes[i]), len(tt.want[i]))
				}
			}
		})
	}
}

// On a socket the frame leaves through one writev: the reader sees the
// bytes in order.
func TestPutSocket(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	s := &Session{conn: a, nc: a}
	ctrl := header(typeControl, 0, 1, 5000)
	body := bytes.Repeat([]byte("x"), 1000)
	hdr := header(typeData, 0, 1, uint32(len(body)))
	want := bytes.Join([][]byte{ctrl, hdr, body}, nil)
	got := make(chan []byte, 1)
	go func() {
		buf := make([]byte, len(want))
		n, _ := io.ReadFull(b, buf)
		got <- buf[:n]
	}()
	if err := s.put(ctrl, hdr, body); err != nil {
		t.Fatal(err)
	}
	if g := <-got; !bytes.Equal(g, want) {
		t.Fatalf("read %d bytes, not the frames", len(g))
	}
}

// TestSteadyStateAllocs checks that moving data allocates nothing per frame
// on either side once a stream runs.
func TestSteadyStateAllocs(t *testing.T) {
	host, guest := pair(t, "socketpair", Config{})
	w, r := dialAccepted(t, host, guest)
	buf, rbuf := make([]byte, 64<<10), make([]byte, 64<<10)
	step := func() {
		done := make(chan struct{})
		go func() {
			io.ReadFull(r, rbuf)
			close(done)
		}()
		w.Write(buf)
		<-done
	}
	for range 20 {
		step()
	}
	// The goroutine and channel of step itself are 2-3 allocations.
	if n := testing.AllocsPerRun(200, step); n > 4 {
		t.Errorf("%.1f allocations per 64 KiB frame", n)
	}
}

// stoppableConn stops reading once stopped, until resumed.
type stoppableConn struct {
	net.Conn
	stop   atomic.Bool
	resume chan struct{}
}

func (c *stoppableConn) Read(p []byte) (int, error) {
	if c.stop.Load() {
		<-c.resume
	}
	return c.Conn.Read(p)
}

// TestWriteWatchdog checks that a peer that stops reading ends the session
// after writeTimeout, while writes that go on slowly do not.
func TestWriteWatchdog(t *testing.T) {
	defer func(d time.Duration) { writeTimeout = d }(writeTimeout)
	writeTimeout = 300 * time.Millisecond
	a, b := socketPair(t)
	sb := &stoppableConn{Conn: b, resume: make(chan struct{})}
	// A window beyond what the socket holds, so that the write itself
	// blocks rather than waiting for credit.
	cfg := Config{Window: 8 << 20}
	host, guest := Client(a, cfg), Server(sb, cfg)
	defer host.Close()
	defer guest.Close()
	defer close(sb.resume) // first: the guest's receive loop may wait on it
	w, r := dialAccepted(t, host, guest)
	go io.Copy(io.Discard, r)
	// Slow writes, each well within the timeout, for longer than it.
	for range 8 {
		if _, err := w.Write(make([]byte, 1000)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(writeTimeout / 4)
	}
	if err := host.Err(); err != nil {
		t.Fatalf("the session ended under slow writes: %v", err)
	}
	// The guest stops reading: once the socket is full, the host's write
	// blocks.
	sb.stop.Store(true)
	go func() {
		buf := make([]byte, 64<<10)
		for {
			if _, err := w.Write(buf); err != nil {
				return
			}
		}
	}()
	select {
	case <-host.Done():
	case <-time.After(10 * writeTimeout):
		t.Fatal("the session did not end")
	}
	if err := host.Err(); !errors.Is(err, ErrProtocol) {
		t.Fatalf("session ended with %v, want ErrProtocol", err)
	}
}
