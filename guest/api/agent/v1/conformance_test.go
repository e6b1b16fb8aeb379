package agentv1_test

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	agentv1 "github.com/airlock-sandbox/airlock/guest/api/agent/v1"
	"github.com/airlock-sandbox/airlock/guest/api/agent/v1/agentpb"
)

// pairs are each hand-written message and protoc-gen-go's for the same
// .proto message. TestPairsComplete checks none is missing.
var pairs = []struct {
	hand func() agentv1.Message
	pb   func() proto.Message
}{
	{func() agentv1.Message { return new(agentv1.AgentRequest) }, func() proto.Message { return new(agentpb.AgentRequest) }},
	{func() agentv1.Message { return new(agentv1.AgentResponse) }, func() proto.Message { return new(agentpb.AgentResponse) }},
	{func() agentv1.Message { return new(agentv1.ExecStart) }, func() proto.Message { return new(agentpb.ExecStart) }},
	{func() agentv1.Message { return new(agentv1.Resize) }, func() proto.Message { return new(agentpb.Resize) }},
	{func() agentv1.Message { return new(agentv1.ExecRequest) }, func() proto.Message { return new(agentpb.ExecRequest) }},
	{func() agentv1.Message { return new(agentv1.Started) }, func() proto.Message { return new(agentpb.Started) }},
	{func() agentv1.Message { return new(agentv1.Exit) }, func() proto.Message { return new(agentpb.Exit) }},
	{func() agentv1.Message { return new(agentv1.Error) }, func() proto.Message { return new(agentpb.Error) }},
	{func() agentv1.Message { return new(agentv1.ExecEvent) }, func() proto.Message { return new(agentpb.ExecEvent) }},
	{func() agentv1.Message { return new(agentv1.InfoRequest) }, func() proto.Message { return new(agentpb.InfoRequest) }},
	{func() agentv1.Message { return new(agentv1.InfoResponse) }, func() proto.Message { return new(agentpb.InfoResponse) }},
	{func() agentv1.Message { return new(agentv1.SetTimeRequest) }, func() proto.Message { return new(agentpb.SetTimeRequest) }},
	{func() agentv1.Message { return new(agentv1.SetTimeResponse) }, func() proto.Message { return new(agentpb.SetTimeResponse) }},
	{func() agentv1.Message { return new(agentv1.TrustCARequest) }, func() proto.Message { return new(agentpb.TrustCARequest) }},
	{func() agentv1.Message { return new(agentv1.TrustCAResponse) }, func() proto.Message { return new(agentpb.TrustCAResponse) }},
	{func() agentv1.Message { return new(agentv1.ShutdownRequest) }, func() proto.Message { return new(agentpb.ShutdownRequest) }},
	{func() agentv1.Message { return new(agentv1.ShutdownResponse) }, func() proto.Message { return new(agentpb.ShutdownResponse) }},
	{func() agentv1.Message { return new(agentv1.LayerRequest) }, func() proto.Message { return new(agentpb.LayerRequest) }},
	{func() agentv1.Message { return new(agentv1.LayerExportRequest) }, func() proto.Message { return new(agentpb.LayerExportRequest) }},
	{func() agentv1.Message { return new(agentv1.LayerForgetRequest) }, func() proto.Message { return new(agentpb.LayerForgetRequest) }},
	{func() agentv1.Message { return new(agentv1.LayerResponse) }, func() proto.Message { return new(agentpb.LayerResponse) }},
	{func() agentv1.Message { return new(agentv1.LayerDone) }, func() proto.Message { return new(agentpb.LayerDone) }},
}

func name(m any) string { return reflect.TypeOf(m).Elem().Name() }

// TestPairsComplete: every message of agent.proto has a hand-written type
// of the same name, and pairs holds it.
func TestPairsComplete(t *testing.T) {
	have := map[string]bool{}
	for _, p := range pairs {
		h, b := name(p.hand()), name(p.pb())
		if h != b {
			t.Errorf("pair %s / %s", h, b)
		}
		have[b] = true
	}
	msgs := agentpb.File_agent_proto.Messages()
	for i := range msgs.Len() {
		if n := string(msgs.Get(i).Name()); !have[n] {
			t.Errorf("agent.proto's %s has no hand-written type in pairs (add it to messages.go and here)", n)
		}
	}
}

// variants fills every field of a fresh message from newMsg with a value
// that is not the default (negative where signed, past 32 bits where the
// type allows it, non-ASCII text, repeated fields with an empty element),
// once for each member of each oneof, recursively.
func variants(newMsg func() protoreflect.Message) []protoreflect.Message {
	desc := newMsg().Descriptor()
	// One variant per oneof member (at least one variant).
	type choice struct{ oneof, member int }
	choices := []choice{{-1, -1}}
	for i := range desc.Oneofs().Len() {
		var next []choice
		for j := range desc.Oneofs().Get(i).Fields().Len() {
			next = append(next, choice{i, j})
		}
		if len(next) > 0 {
			choices = next // messages here have at most one oneof
		}
	}
	var out []protoreflect.Message
	for _, c := range choices {
		subs := []protoreflect.Message{nil}
		var member protoreflect.FieldDescriptor
		if c.oneof >= 0 {
			member = desc.Oneofs().Get(c.oneof).Fields().Get(c.member)
			if member.Kind() == protoreflect.MessageKind {
				subs = variants(func() protoreflect.Message { return newMsg().NewField(member).Message() })
			}
		}
		for _, sub := range subs {
			m := newMsg()
			fields := desc.Fields()
			for i := range fields.Len() {
				f := fields.Get(i)
				if o := f.ContainingOneof(); o != nil && f != member {
					continue
				}
				switch {
				case f.Kind() == protoreflect.MessageKind && sub != nil:
					m.Set(f, protoreflect.ValueOfMessage(sub))
				case f.Kind() == protoreflect.MessageKind:
					m.Set(f, protoreflect.ValueOfMessage(m.NewField(f).Message()))
				case f.IsList():
					l := m.Mutable(f).List()
					l.Append(value(f))
					l.Append(protoreflect.ValueOfString(""))
				default:
					m.Set(f, value(f))
				}
			}
			out = append(out, m)
		}
	}
	return out
}

func value(f protoreflect.FieldDescriptor) protoreflect.Value {
	switch f.Kind() {
	case protoreflect.StringKind:
		return protoreflect.ValueOfString(fmt.Sprintf("ünïcode %s ✓", f.Name()))
	case protoreflect.BytesKind:
		return protoreflect.ValueOfBytes([]byte{0, 0xff, byte(f.Number())})
	case protoreflect.BoolKind:
		return protoreflect.ValueOfBool(true)
	case protoreflect.Int32Kind:
		return protoreflect.ValueOfInt32(-int32(f.Number()) * 1000003)
	case protoreflect.Int64Kind:
		return protoreflect.ValueOfInt64(math.MinInt64 + int64(f.Number()))
	case protoreflect.Uint32Kind:
		return protoreflect.ValueOfUint32(math.MaxUint32 - uint32(f.Number()))
	case protoreflect.Uint64Kind:
		return protoreflect.ValueOfUint64(math.MaxUint64 - uint64(f.Number()))
	}
	panic(fmt.Sprintf("agent.proto's %s is a %s, which the hand-written encoding does not do yet", f.FullName(), f.Kind()))
}

// TestConformance: a message with every field set, each oneof member in
// turn, goes protobuf -> hand-written -> protobuf unchanged, and the
// hand-written encoder writes the very bytes protobuf writes. A field the
// hand-written type lacks is lost on the way and fails this.
func TestConformance(t *testing.T) {
	n := 0
	for _, p := range pairs {
		for _, want := range variants(func() protoreflect.Message { return p.pb().ProtoReflect() }) {
			n++
			wire, err := proto.MarshalOptions{Deterministic: true}.Marshal(want.Interface())
			if err != nil {
				t.Fatal(err)
			}
			h := p.hand()
			if err := agentv1.Unmarshal(wire, h); err != nil {
				t.Fatalf("%s: hand-written Unmarshal of %x: %v", name(h), wire, err)
			}
			again, err := agentv1.Marshal(nil, h)
			if err != nil {
				t.Fatalf("%s: hand-written Marshal: %v", name(h), err)
			}
			if !bytes.Equal(again, wire) {
				t.Errorf("%s: protobuf wrote\n%x\nthe hand-written type\n%x\n(from %v)", name(h), wire, again, want)
			}
			got := p.pb()
			if err := proto.Unmarshal(again, got); err != nil || !proto.Equal(got, want.Interface()) {
				t.Errorf("%s: through the hand-written type %v became %v (err %v)", name(h), want, got, err)
			}
		}
	}
	if n < 30 {
		t.Fatalf("only %d variants", n)
	}
}

// TestMarshalUTF8 refuses a string that is not UTF-8, as protobuf does.
func TestMarshalUTF8(t *testing.T) {
	b := []byte("kept")
	m := &agentv1.ExecRequest{Msg: &agentv1.ExecRequest_Start{Start: &agentv1.ExecStart{Argv: []string{"ls", "\xff"}}}}
	out, err := agentv1.Marshal(b, m)
	if err == nil || string(out) != "kept" {
		t.Fatalf("Marshal = %q, %v; want b unchanged and an error", out, err)
	}
	if _, err := proto.Marshal(&agentpb.ExecStart{Argv: []string{"\xff"}}); err == nil {
		t.Fatal("protobuf marshalled invalid UTF-8; this test's premise is wrong")
	}
}

// TestNilMembers: a oneof member holding a nil message is written as an
// empty message, as protobuf writes it.
func TestNilMembers(t *testing.T) {
	h, err := agentv1.Marshal(nil, &agentv1.AgentRequest{Call: &agentv1.AgentRequest_Info{}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := proto.Marshal(&agentpb.AgentRequest{Call: &agentpb.AgentRequest_Info{}})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(h, p) {
		t.Fatalf("hand-written %x, protobuf %x", h, p)
	}
}

// TestMerge: a message field repeated on the wire merges into the first,
// and a later oneof member replaces an earlier one, as in protobuf.
func TestMerge(t *testing.T) {
	var wire []byte
	for _, m := range []proto.Message{
		&agentpb.ExecRequest{Msg: &agentpb.ExecRequest_Start{Start: &agentpb.ExecStart{Argv: []string{"a"}, Cwd: "/x"}}},
		&agentpb.ExecRequest{Msg: &agentpb.ExecRequest_Start{Start: &agentpb.ExecStart{Argv: []string{"b"}, Tty: true}}},
	} {
		b, _ := proto.Marshal(m)
		wire = append(wire, b...)
	}
	var h agentv1.ExecRequest
	if err := agentv1.Unmarshal(wire, &h); err != nil {
		t.Fatal(err)
	}
	want := &agentv1.ExecStart{Argv: []string{"a", "b"}, Cwd: "/x", Tty: true}
	if got := h.GetStart(); !reflect.DeepEqual(got, want) {
		t.Fatalf("merged %+v, want %+v", got, want)
	}
	b, _ := proto.Marshal(&agentpb.ExecRequest{Msg: &agentpb.ExecRequest_Signal{Signal: 9}})
	if err := agentv1.Unmarshal(append(wire, b...), &h); err != nil || h.GetSignal() != 9 || h.GetStart() != nil {
		t.Fatalf("after a later member: %+v, %v", h.Msg, err)
	}
}

// TestNoAliasing: a decoded message keeps nothing of the input buffer
// (execwire reuses it for the next frame).
func TestNoAliasing(t *testing.T) {
	wire, _ := proto.Marshal(&agentpb.ExecRequest{Msg: &agentpb.ExecRequest_Stdin{Stdin: []byte("input")}})
	var h agentv1.ExecRequest
	if err := agentv1.Unmarshal(wire, &h); err != nil {
		t.Fatal(err)
	}
	for i := range wire {
		wire[i] = 'X'
	}
	if got := string(h.GetStdin()); got != "input" {
		t.Fatalf("stdin = %q after the buffer changed", got)
	}
}

// FuzzConformance: for any bytes, the hand-written decoder accepts exactly
// what protobuf accepts and reads the same message (unknown fields aside,
// which it drops), for every message type.
func FuzzConformance(f *testing.F) {
	for _, p := range pairs {
		for _, m := range variants(func() protoreflect.Message { return p.pb().ProtoReflect() }) {
			b, _ := proto.Marshal(m.Interface())
			f.Add(b)
		}
	}
	f.Add([]byte{0x0b, 0x0c})             // an empty unknown group
	f.Add([]byte{0x0b, 0x1b, 0x1c, 0x0c}) // nested groups
	f.Add([]byte{0x0b, 0x14})             // a group ended by another number
	f.Add([]byte{0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Add([]byte{0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02})
	f.Add([]byte{0x0a, 0x02, 0xc3, 0x28})             // invalid UTF-8
	f.Add([]byte{0xfa, 0xff, 0xff, 0xff, 0x0f, 0x00}) // field 2^29-1... and past it
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, p := range pairs {
			h, want := p.hand(), p.pb()
			herr := agentv1.Unmarshal(data, h)
			perr := proto.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(data, want)
			if (herr == nil) != (perr == nil) {
				t.Fatalf("%s: hand-written: %v; protobuf: %v", name(h), herr, perr)
			}
			if herr != nil {
				if !errors.Is(herr, agentv1.ErrWire) {
					t.Fatalf("%s: error %v does not wrap ErrWire", name(h), herr)
				}
				continue
			}
			got, err := agentv1.Marshal(nil, h)
			if err != nil {
				t.Fatalf("%s: re-encoding what was read: %v", name(h), err)
			}
			wire, _ := proto.MarshalOptions{Deterministic: true}.Marshal(want)
			if !bytes.Equal(got, wire) {
				t.Fatalf("%s: read %x as\n%x\nprotobuf as\n%x", name(h), data, got, wire)
			}
		}
	})
}
