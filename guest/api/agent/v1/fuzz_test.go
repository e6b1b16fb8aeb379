package agentv1

import (
	"bytes"
	"strings"
	"testing"
)

// messages are a fresh one of each message the guest or the host decodes
// from the other side.
func messages() []Message {
	return []Message{
		&AgentRequest{}, &AgentResponse{}, &ExecRequest{}, &ExecEvent{},
		&LayerRequest{}, &LayerResponse{}, &Ready{}, &Parked{}, &Wake{},
	}
}

// FuzzUnmarshal feeds any bytes to every message's decoder: it must refuse
// or accept without panicking, and what it accepts must encode to bytes
// that decode to the same encoding again (nothing accepted that the
// encoder cannot carry).
func FuzzUnmarshal(f *testing.F) {
	for _, m := range []Message{
		&ExecRequest{Msg: &ExecRequest_Start{Start: &ExecStart{Argv: []string{"ls", "-l"}, Env: []string{"A=b"}, Tty: true, Rows: 24, TimeoutMs: -1}}},
		&ExecEvent{Event: &ExecEvent_Exit{Exit: &Exit{Code: -1, Signal: 9, TimedOut: true, DurationMs: 1 << 40}}},
		&AgentResponse{Result: &AgentResponse_Error{Error: &Error{Code: Code_NOT_FOUND, Message: "x"}}},
		&LayerRequest{Call: &LayerRequest_Forget{Forget: &LayerForgetRequest{Paths: []string{"a/b", ""}}}},
		&Wake{Version: 2, UnixNanos: 1, Entropy: bytes.Repeat([]byte{7}, 32)},
	} {
		b, err := m.MarshalVT()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{"", "\x0b\x0c", "\x0a\x80", "\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\x02", "\x0b" + strings.Repeat("\x0b", 100) + "\x0c", "\x22\x05\x0a\x03\xff\xfe\xfd"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		for _, m := range messages() {
			if err := m.UnmarshalVT(in); err != nil {
				continue
			}
			once, err := m.MarshalVT()
			if err != nil {
				t.Fatalf("%T accepted %x but does not encode: %v", m, in, err)
			}
			m.Reset()
			if err := m.UnmarshalVT(once); err != nil {
				t.Fatalf("%T: its own encoding %x of %x is refused: %v", m, once, in, err)
			}
			twice, err := m.MarshalVT()
			if err != nil || !bytes.Equal(once, twice) {
				t.Fatalf("%T: %x re-encodes as %x (%v)", m, once, twice, err)
			}
		}
	})
}

// TestUnmarshalCopies: a decoded message keeps nothing of the input
// buffer, which execwire's Reader reuses for the next frame.
func TestUnmarshalCopies(t *testing.T) {
	in, err := (&ExecRequest{Msg: &ExecRequest_Stdin{Stdin: []byte("input")}}).MarshalVT()
	if err != nil {
		t.Fatal(err)
	}
	var m ExecRequest
	if err := m.UnmarshalVT(in); err != nil {
		t.Fatal(err)
	}
	for i := range in {
		in[i] = 'X'
	}
	if got := string(m.GetStdin()); got != "input" {
		t.Fatalf("stdin after the buffer changed: %q", got)
	}
}
