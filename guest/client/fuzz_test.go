package client

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	agentv1 "github.com/airlock-sandbox/airlock/guest/api/agent/v1"
	"github.com/airlock-sandbox/airlock/guest/api/execwire"
)

// frames encodes what a guest sends on a task's stream.
func frames(parts ...any) []byte {
	var b []byte
	for _, p := range parts {
		switch p := p.(type) {
		case *agentv1.ExecEvent:
			b, _ = execwire.AppendMessage(b, execwire.KindEvent, p)
		case output:
			b = append(b, make([]byte, execwire.HeaderSize)...)
			execwire.PutHeader(b[len(b)-execwire.HeaderSize:], p.kind, len(p.data))
			b = append(b, p.data...)
		case []byte:
			b = append(b, p...)
		}
	}
	return b
}

type output struct {
	kind execwire.Kind
	data []byte
}

// guestSaid is what the host must make of in: the output it must pass on
// before it stops reading (a cut frame's bytes included).
func guestSaid(in []byte) (out, errOut []byte) {
	for len(in) >= execwire.HeaderSize {
		k, n := execwire.Kind(in[0]), int(binary.BigEndian.Uint32(in[1:execwire.HeaderSize]))
		in = in[execwire.HeaderSize:]
		if n > execwire.MaxPayload {
			return
		}
		payload := in[:min(n, len(in))]
		in = in[len(payload):]
		switch k {
		case execwire.KindStdout:
			out = append(out, payload...)
		case execwire.KindStderr:
			errOut = append(errOut, payload...)
		case execwire.KindEvent:
			var ev agentv1.ExecEvent
			if len(payload) < n || ev.UnmarshalVT(payload) != nil || ev.GetExit() != nil || ev.GetError() != nil {
				return
			}
		default:
			return
		}
	}
	return
}

// answerWith plays a guest that waits for the host's first request (a
// stream may be dialled ahead of its use), then writes in() and ends the
// stream; the host's further requests are read and dropped.
func answerWith(guest net.Conn, in func() []byte) {
	defer guest.Close()
	r := execwire.NewReader(guest)
	_, n, err := r.Next()
	if err == nil {
		_, err = r.Payload(n)
	}
	if err != nil {
		return
	}
	go io.Copy(io.Discard, guest)
	guest.Write(in())
}

// FuzzExecStream plays a guest that sends in on a task's stream and runs
// the host's Exec against it: no panic, output reaches the right writer
// exactly as framed, and an exit status is only ever one a process can
// have.
func FuzzExecStream(f *testing.F) {
	started := &agentv1.ExecEvent{Event: &agentv1.ExecEvent_Started{Started: &agentv1.Started{Pid: 7}}}
	f.Add(frames(started, output{execwire.KindStdout, []byte("out")}, output{execwire.KindStderr, []byte("err")},
		&agentv1.ExecEvent{Event: &agentv1.ExecEvent_Exit{Exit: &agentv1.Exit{Code: 3, DurationMs: 5}}}))
	f.Add(frames(started, &agentv1.ExecEvent{Event: &agentv1.ExecEvent_Exit{Exit: &agentv1.Exit{Code: -1, Signal: 99}}}))
	f.Add(frames(&agentv1.ExecEvent{Event: &agentv1.ExecEvent_Exit{Exit: &agentv1.Exit{Signal: 9, TimedOut: true}}}))
	f.Add(frames(&agentv1.ExecEvent{Event: &agentv1.ExecEvent_Error{Error: &agentv1.Error{Code: 5, Message: "command not found: x"}}}))
	f.Add(frames(output{execwire.KindStdout, []byte("cut")})[:7])
	f.Add([]byte{0x09, 0, 0, 0, 1, 0})
	f.Add([]byte{0x03, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0x02, 0, 0, 0, 4, 0xff, 0xff, 0xff, 0xff})

	var in []byte
	c, err := New(func(context.Context, uint32) (net.Conn, error) {
		host, guest := net.Pipe()
		go answerWith(guest, func() []byte { return in })
		return host, nil
	})
	if err != nil {
		f.Fatal(err)
	}
	defer c.Close()
	f.Fuzz(func(t *testing.T, data []byte) {
		in = data
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var out, errOut bytes.Buffer
		exit, err := c.Exec(ctx, Spec{Argv: []string{"x"}}, Stdio{Stdout: &out, Stderr: &errOut, Started: func(int) {}})
		if ctx.Err() != nil {
			t.Fatalf("Exec hung on %q", data)
		}
		if err == nil && (exit.Code < 0 || exit.Code > 255 || exit.Signal < 0 || exit.Signal > maxSignal || exit.Duration < 0) {
			t.Fatalf("impossible exit accepted: %+v", exit)
		}
		wantOut, wantErr := guestSaid(data)
		if !bytes.Equal(out.Bytes(), wantOut) || !bytes.Equal(errOut.Bytes(), wantErr) {
			t.Fatalf("output: got %q %q, want %q %q", out.Bytes(), errOut.Bytes(), wantOut, wantErr)
		}
	})
}

// FuzzAgentCall plays a guest that answers an agent call with in: no
// panic, no hang, and Info succeeds only with an Info answer.
func FuzzAgentCall(f *testing.F) {
	answer := func(m *agentv1.AgentResponse) []byte {
		b, _ := execwire.AppendMessage(nil, execwire.KindEvent, m)
		return b
	}
	f.Add(answer(&agentv1.AgentResponse{Result: &agentv1.AgentResponse_Info{Info: &agentv1.InfoResponse{AgentVersion: "v", AgentInstance: 3}}}))
	f.Add(answer(&agentv1.AgentResponse{Result: &agentv1.AgentResponse_Error{Error: &agentv1.Error{Code: 12, Message: "no"}}}))
	f.Add(answer(&agentv1.AgentResponse{Result: &agentv1.AgentResponse_Shutdown{Shutdown: &agentv1.ShutdownResponse{}}}))
	f.Add([]byte{0x02, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0x03, 0, 0, 0, 1, 0})

	var in []byte
	c, _ := New(func(context.Context, uint32) (net.Conn, error) {
		host, guest := net.Pipe()
		go answerWith(guest, func() []byte { return in })
		return host, nil
	})
	defer c.Close()
	f.Fuzz(func(t *testing.T, data []byte) {
		in = data
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		info, err := c.Info(ctx)
		if ctx.Err() != nil {
			t.Fatalf("Info hung on %q", data)
		}
		if (err == nil) != (info != nil) {
			t.Fatalf("info %v and err %v", info, err)
		}
	})
}

// FuzzCallStream plays a guest whose first stream answers the first call
// with in and then serves calls right, as do its later streams: no panic,
// and a call after a failed one succeeds, since a failed call never leaves
// its stream for the next (which would then read what is left of in).
func FuzzCallStream(f *testing.F) {
	info, _ := execwire.AppendMessage(nil, execwire.KindEvent, &agentv1.AgentResponse{Result: &agentv1.AgentResponse_Info{Info: &agentv1.InfoResponse{AgentInstance: 3}}})
	f.Add(info)
	f.Add(append(append([]byte(nil), info...), info...))
	f.Add(append(append([]byte(nil), info...), info[:4]...))
	f.Add(info[:len(info)-1])
	f.Add([]byte{0x03, 0, 0, 0, 1, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		var dials atomic.Int32
		c, _ := New(func(context.Context, uint32) (net.Conn, error) {
			host, guest := net.Pipe()
			first := dials.Add(1) == 1
			go func() {
				defer guest.Close()
				r := execwire.NewReader(guest)
				for i := 0; ; i++ {
					_, n, err := r.Next()
					if err == nil {
						_, err = r.Payload(n)
					}
					if err != nil {
						return
					}
					answer := info
					if first && i == 0 {
						answer = data
					}
					if _, err := guest.Write(answer); err != nil {
						return
					}
				}
			}()
			return host, nil
		})
		defer c.Close()
		call := func(d time.Duration) (*agentv1.InfoResponse, error) {
			ctx, cancel := context.WithTimeout(context.Background(), d)
			defer cancel()
			return c.Info(ctx)
		}
		// The guest may make a call wait for its context (a frame it never
		// finishes): a mute guest's right. The call after that one has a
		// new stream.
		_, err1 := call(50 * time.Millisecond)
		info2, err2 := call(2 * time.Second)
		if err1 != nil && (err2 != nil || info2.GetAgentInstance() != 3) {
			t.Fatalf("a call after a failed one (%v): %v %v", err1, info2, err2)
		}
		if err2 != nil {
			if info3, err3 := call(10 * time.Second); err3 != nil || info3.GetAgentInstance() != 3 {
				t.Fatalf("a call after a failed one (%v): %v %v", err2, info3, err3)
			}
		}
	})
}
