package client

import (
	"bytes"
	"errors"
	"testing"

	agentv1 "github.com/airlock-sandbox/airlock/guest/api/agent/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// eventStream encodes events as the fuzz input: each one length-prefixed.
func eventStream(evs ...*agentv1.ExecEvent) []byte {
	var b []byte
	for _, ev := range evs {
		m, _ := proto.Marshal(ev)
		b = protowire.AppendBytes(b, m)
	}
	return b
}

// FuzzExecEvents decodes what a guest agent sends about a task (protobuf
// ExecEvents, as gRPC hands them over) and runs them through the host's
// handling: no panic, output reaches the right writer, and an exit status
// is only ever one a process can have.
func FuzzExecEvents(f *testing.F) {
	f.Add(eventStream(
		(&agentv1.ExecEvent{Event: &agentv1.ExecEvent_Started{Started: &agentv1.Started{Pid: 7}}}),
		(&agentv1.ExecEvent{Event: &agentv1.ExecEvent_Stdout{Stdout: []byte("out")}}),
		(&agentv1.ExecEvent{Event: &agentv1.ExecEvent_Stderr{Stderr: []byte("err")}}),
		(&agentv1.ExecEvent{Event: &agentv1.ExecEvent_Exit{Exit: &agentv1.Exit{Code: 3, DurationMs: 5}}}),
	))
	f.Add(eventStream((&agentv1.ExecEvent{Event: &agentv1.ExecEvent_Exit{Exit: &agentv1.Exit{Code: -1, Signal: 99}}})))
	f.Add(eventStream((&agentv1.ExecEvent{Event: &agentv1.ExecEvent_Exit{Exit: &agentv1.Exit{Signal: 9, TimedOut: true}}})))
	f.Add([]byte{0x05, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, in []byte) {
		var out, errOut bytes.Buffer
		var wantOut, wantErr []byte
		h := events{stdio: Stdio{Started: func(int) {}}, out: &out, errOut: &errOut}
		for len(in) > 0 {
			m, n := protowire.ConsumeBytes(in)
			if n < 0 {
				return
			}
			in = in[n:]
			var ev agentv1.ExecEvent
			if proto.Unmarshal(m, &ev) != nil {
				continue
			}
			wantOut = append(wantOut, ev.GetStdout()...)
			wantErr = append(wantErr, ev.GetStderr()...)
			exit, done, err := h.handle(&ev)
			if err != nil && !errors.Is(err, ErrBadExit) {
				t.Fatalf("unexpected error %v", err)
			}
			if done && err == nil && (exit.Code < 0 || exit.Code > 255 || exit.Signal < 0 || exit.Signal > maxSignal || exit.Duration < 0) {
				t.Fatalf("impossible exit accepted: %+v", exit)
			}
			if done {
				break
			}
		}
		if !bytes.Equal(out.Bytes(), wantOut) || !bytes.Equal(errOut.Bytes(), wantErr) {
			t.Fatalf("output mixed up")
		}
	})
}
