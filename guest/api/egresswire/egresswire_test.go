package egresswire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// noHalfClose is a transport connection without CloseWrite, as vz's
// VirtioSocketConnection is: a TCP loopback connection with the method
// hidden, so that writes buffer as on a real socket.
type noHalfClose struct{ net.Conn }

func tcpPair(t *testing.T) (a, b net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		acc <- c
	}()
	a, err = net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b = <-acc
	if b == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	deadline := time.Now().Add(10 * time.Second)
	a.SetDeadline(deadline)
	b.SetDeadline(deadline)
	return noHalfClose{a}, noHalfClose{b}
}

// Each side half-closes in turn over a transport that cannot: what the
// other side sends after a half-close still arrives, and each end reads
// EOF exactly where the peer's CloseWrite was.
func TestHalfCloseBothWays(t *testing.T) {
	a, b := tcpPair(t)
	if _, ok := a.(interface{ CloseWrite() error }); ok {
		t.Fatal("the test transport must not half-close")
	}
	guest, host := Client(a), Server(b)
	request := bytes.Repeat([]byte("req."), 100<<10) // 400 KiB: two records
	upload := []byte("sent after the response ended")

	done := make(chan error, 1)
	go func() {
		if _, err := guest.Write(request); err != nil {
			done <- err
			return
		}
		resp, err := io.ReadAll(guest)
		if err != nil || string(resp) != "response" {
			done <- errors.New("guest read " + string(resp) + ": " + errString(err))
			return
		}
		// The host has half-closed; the guest goes on writing.
		if _, err := guest.Write(upload); err != nil {
			done <- err
			return
		}
		done <- guest.CloseWrite()
	}()

	got := make([]byte, len(request))
	if _, err := io.ReadFull(host, got); err != nil || !bytes.Equal(got, request) {
		t.Fatalf("host read the request: %v", err)
	}
	if !host.Framed() {
		t.Fatal("the host did not see a framed stream")
	}
	if _, err := host.Write([]byte("response")); err != nil {
		t.Fatal(err)
	}
	if err := host.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if _, err := host.Write([]byte("x")); !errors.Is(err, ErrWriteClosed) {
		t.Fatalf("write after CloseWrite: %v", err)
	}
	rest, err := io.ReadAll(host)
	if err != nil || !bytes.Equal(rest, upload) {
		t.Fatalf("host read %q after its half-close: %v", rest, err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func errString(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}

// A stream without the preamble passes through unchanged, first byte and
// all, and its CloseWrite is the transport's (none here).
func TestServerUnframed(t *testing.T) {
	a, b := tcpPair(t)
	host := Server(b)
	go func() {
		io.WriteString(a, "CONNECT example.com:443 HTTP/1.1\r\n\r\n")
		a.Close()
	}()
	got, err := io.ReadAll(host)
	if err != nil || string(got) != "CONNECT example.com:443 HTTP/1.1\r\n\r\n" {
		t.Fatalf("%q %v", got, err)
	}
	if host.Framed() {
		t.Fatal("an HTTP request taken for a framed stream")
	}
	if err := host.CloseWrite(); !errors.Is(err, ErrNoHalfClose) {
		t.Fatalf("CloseWrite on a transport without it: %v", err)
	}
	if _, err := host.Write([]byte("x")); err != nil {
		t.Fatalf("unframed write: %v", err)
	}
}

// A Server writes nothing before it knows the format.
func TestServerWriteBeforeRead(t *testing.T) {
	_, b := tcpPair(t)
	host := Server(b)
	if _, err := host.Write([]byte("x")); err == nil {
		t.Fatal("a write before the first read went out")
	}
	if err := host.CloseWrite(); err == nil {
		t.Fatal("CloseWrite before the first read")
	}
}

// A deadline that passes inside the preamble or a header leaves the stream
// where it was: the next read goes on from there.
func TestReadResumesAfterDeadline(t *testing.T) {
	a, b := tcpPair(t)
	host := Server(b)
	stream := []byte(Preamble)
	stream = binary.BigEndian.AppendUint32(stream, 5)
	stream = append(stream, "hello"...)
	stream = binary.BigEndian.AppendUint32(stream, 0)
	cuts := []int{3, len(Preamble) + 2, len(Preamble) + 4 + 2}
	go func() {
		prev := 0
		for _, c := range append(cuts, len(stream)) {
			a.Write(stream[prev:c])
			prev = c
			time.Sleep(150 * time.Millisecond)
		}
	}()
	var got []byte
	buf := make([]byte, 64)
	timeouts := 0
	for {
		host.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
		n, err := host.Read(buf)
		got = append(got, buf[:n]...)
		if err == io.EOF {
			break
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			timeouts++
			if timeouts > 100 {
				t.Fatal("no end record")
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if string(got) != "hello" || timeouts == 0 {
		t.Fatalf("read %q with %d timeouts", got, timeouts)
	}
}

// Hostile or broken streams end in an error, never a hang or a panic.
func TestBrokenStreams(t *testing.T) {
	hdr := func(n uint32) string { return string(binary.BigEndian.AppendUint32(nil, n)) }
	cases := []struct {
		name, stream string
		want         error
	}{
		{"wrong preamble", "\x00airlock-egress-9\n" + hdr(1) + "x", ErrProtocol},
		{"short preamble", "\x00airl", io.ErrUnexpectedEOF},
		{"record too long", Preamble + hdr(MaxRecord+1), ErrProtocol},
		{"cut inside a header", Preamble + hdr(3)[:2], io.ErrUnexpectedEOF},
		{"cut inside a record", Preamble + hdr(10) + "short", io.ErrUnexpectedEOF},
		{"closed at a boundary", Preamble + hdr(2) + "ok", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b := tcpPair(t)
			host := Server(b)
			go func() {
				io.WriteString(a, c.stream)
				a.Close()
			}()
			_, err := io.ReadAll(host)
			if c.want == nil {
				if err != nil {
					t.Fatalf("a transport closed between records: %v, want EOF", err)
				}
				return
			}
			if !errors.Is(err, c.want) && !(c.want == io.ErrUnexpectedEOF && errors.Is(err, io.EOF)) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
			if err == nil {
				t.Fatal("a broken stream read as complete")
			}
		})
	}
}

// ReadFrom sends each read as one record, with the preamble before the
// first, and an empty Write sends nothing.
func TestClientRecords(t *testing.T) {
	a, b := tcpPair(t)
	guest := Client(a)
	if n, err := guest.Write(nil); n != 0 || err != nil {
		t.Fatalf("empty write: %d %v", n, err)
	}
	if _, err := guest.ReadFrom(strings.NewReader("abc")); err != nil {
		t.Fatal(err)
	}
	if err := guest.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if err := guest.CloseWrite(); err != nil {
		t.Fatalf("second CloseWrite: %v", err)
	}
	a.Close()
	got, _ := io.ReadAll(b)
	want := Preamble + "\x00\x00\x00\x03abc" + "\x00\x00\x00\x00"
	if string(got) != want {
		t.Fatalf("wire %q, want %q", got, want)
	}
}

// A guest that half-closes before writing anything still sends the
// preamble, so the host knows the format.
func TestCloseWriteFirst(t *testing.T) {
	a, b := tcpPair(t)
	guest := Client(a)
	if err := guest.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	host := Server(b)
	n, err := host.Read(make([]byte, 8))
	if n != 0 || err != io.EOF || !host.Framed() {
		t.Fatalf("read %d %v framed %v", n, err, host.Framed())
	}
}

func FuzzServer(f *testing.F) {
	f.Add([]byte(Preamble + "\x00\x00\x00\x02hi\x00\x00\x00\x00"))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Add([]byte(Preamble + "\xff\xff\xff\xff"))
	f.Add([]byte("\x00"))
	f.Fuzz(func(t *testing.T, stream []byte) {
		a, b := net.Pipe()
		defer b.Close()
		go func() {
			a.Write(stream)
			a.Close()
		}()
		b.SetDeadline(time.Now().Add(5 * time.Second))
		host := Server(b)
		got, err := io.ReadAll(host)
		if len(got) > len(stream) {
			t.Fatalf("read %d bytes of a %d-byte stream", len(got), len(stream))
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatal("hang")
		}
	})
}

// A FramedServer may write first (the benchmark's stand-in for the gate
// does) and reads the guest's Preamble before its records.
func TestFramedServer(t *testing.T) {
	a, b := tcpPair(t)
	guest, host := Client(a), FramedServer(b)
	if _, err := host.Write([]byte("first")); err != nil {
		t.Fatal(err)
	}
	host.CloseWrite()
	got, err := io.ReadAll(guest)
	if err != nil || string(got) != "first" {
		t.Fatalf("guest read %q %v", got, err)
	}
	guest.Write([]byte("up"))
	guest.CloseWrite()
	got, err = io.ReadAll(host)
	if err != nil || string(got) != "up" {
		t.Fatalf("host read %q %v", got, err)
	}
	// Without the preamble, a FramedServer refuses the stream.
	a2, b2 := tcpPair(t)
	go func() { io.WriteString(a2, "GET / HTTP/1.1\r\n\r\n"); a2.Close() }()
	if _, err := io.ReadAll(FramedServer(b2)); !errors.Is(err, ErrProtocol) {
		t.Fatalf("an unframed stream read by a FramedServer: %v", err)
	}
}

// One read returns the payload of every record that has arrived, as a
// read of the plain stream would: small records do not cost a read each.
func TestReadJoinsRecords(t *testing.T) {
	a, b := tcpPair(t)
	guest := Client(a)
	for _, s := range []string{"one ", "two ", "three"} {
		if _, err := guest.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	guest.CloseWrite()
	host := Server(b)
	time.Sleep(50 * time.Millisecond) // all of it on the host's socket
	buf := make([]byte, 64)
	n, err := host.Read(buf)
	if err != nil || string(buf[:n]) != "one two three" {
		t.Fatalf("first read %q %v; want the three records' payload", buf[:n], err)
	}
	if n, err := host.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("after the end record: %d %v", n, err)
	}
}
