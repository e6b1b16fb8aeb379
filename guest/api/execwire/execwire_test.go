package execwire

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"testing"

	agentv1 "github.com/airlock-sandbox/airlock/guest/api/agent/v1"
)

func TestFramesRoundTrip(t *testing.T) {
	host, guest := net.Pipe()
	defer host.Close()
	s := NewStream(guest)
	go func() {
		s.Send(&agentv1.ExecEvent{Event: &agentv1.ExecEvent_Started{Started: &agentv1.Started{Pid: 3}}})
		s.SendOutput(KindStdout, append(make([]byte, HeaderSize), "hello"...))
		s.SendOutput(KindStderr, make([]byte, HeaderSize)) // empty: still a frame
		s.SendError(agentv1.Errorf(agentv1.Code_NOT_FOUND, "command not found: x"))
		s.SendError(errors.New("plain"))
		s.Close()
	}()
	r := NewReader(host)
	next := func(want Kind) int {
		t.Helper()
		k, n, err := r.Next()
		if err != nil || k != want {
			t.Fatalf("got %s %d %v, want a %s frame", k, n, err, want)
		}
		return n
	}
	var ev agentv1.ExecEvent
	if err := r.Message(next(KindEvent), &ev); err != nil || ev.GetStarted().GetPid() != 3 {
		t.Fatalf("started: %v %v", &ev, err)
	}
	var out bytes.Buffer
	if err := r.Copy(&out, next(KindStdout), make([]byte, 2)); err != nil || out.String() != "hello" {
		t.Fatalf("stdout %q %v", out.String(), err)
	}
	if n := next(KindStderr); n != 0 {
		t.Fatalf("empty stderr frame of %d bytes", n)
	}
	for _, want := range []*agentv1.Error{{Code: agentv1.Code_NOT_FOUND, Message: "command not found: x"}, {Code: agentv1.Code_UNKNOWN, Message: "plain"}} {
		if err := r.Message(next(KindEvent), &ev); err != nil || ev.GetError().GetCode() != want.Code || ev.GetError().GetMessage() != want.Message {
			t.Fatalf("error event %v %v, want %v", &ev, err, want)
		}
	}
	if _, _, err := r.Next(); err != io.EOF {
		t.Fatalf("after the last frame: %v, want io.EOF", err)
	}
}

func TestBadFrames(t *testing.T) {
	hdr := func(k Kind, n int) []byte { b := make([]byte, HeaderSize); PutHeader(b, k, n); return b }
	for _, tt := range []struct {
		name string
		in   []byte
		msg  string
	}{
		{"unknown kind", hdr(9, 0), "unknown kind 9"},
		{"kind zero", hdr(0, 0), "unknown kind 0"},
		{"oversized", hdr(KindStdout, MaxPayload+1), "larger than max"},
		{"cut header", []byte{3, 0}, "ended inside a frame"},
		{"cut payload", append(hdr(KindEvent, 10), 1, 2), "ended inside a frame"},
		{"not protobuf", append(hdr(KindEvent, 2), 0xff, 0xff), "bad frame"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := NewReader(bytes.NewReader(tt.in))
			k, n, err := r.Next()
			if err == nil {
				var ev agentv1.ExecEvent
				if k == KindEvent {
					err = r.Message(n, &ev)
				} else {
					err = r.Copy(io.Discard, n, make([]byte, 8))
				}
			}
			if !errors.Is(err, ErrFrame) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("got %v, want ErrFrame saying %q", err, tt.msg)
			}
		})
	}
}

// A failed write still consumes the frame, so the stream stays in step.
func TestCopyWriteError(t *testing.T) {
	var in []byte
	for _, s := range []string{"first", "second"} {
		b := make([]byte, HeaderSize)
		PutHeader(b, KindStdout, len(s))
		in = append(append(in, b...), s...)
	}
	r := NewReader(bytes.NewReader(in))
	_, n, _ := r.Next()
	var we *WriteError
	if err := r.Copy(failWriter{}, n, make([]byte, 2)); !errors.As(err, &we) {
		t.Fatalf("got %v, want a *WriteError", err)
	}
	_, n, err := r.Next()
	var out bytes.Buffer
	if err != nil || r.Copy(&out, n, make([]byte, 4)) != nil || out.String() != "second" {
		t.Fatalf("next frame %q %v", out.String(), err)
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestSendOutputRefusesOversize(t *testing.T) {
	host, guest := net.Pipe()
	defer host.Close()
	s := NewStream(guest)
	defer s.Close()
	if err := s.SendOutput(KindStdout, make([]byte, HeaderSize+MaxPayload+1)); !errors.Is(err, ErrFrame) {
		t.Fatalf("got %v, want ErrFrame", err)
	}
}
