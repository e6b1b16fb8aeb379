//go:build linux

package agent

import (
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	agentv1 "github.com/airlock-sandbox/airlock/guest/api/agent/v1"
)

// zeroCopyMin is the smallest task output the codec sends from the output
// buffer itself instead of a marshalled copy.
const zeroCopyMin = 16 << 10

// codec is gRPC's proto codec, except that an ExecEvent carrying a large
// stdout or stderr chunk is encoded as its few header bytes followed by the
// chunk itself: no copy of the output, which under emulation costs as much
// as a pass over the transport. gRPC frees the chunk's buffer once written;
// it then goes back to freeBufs (outputPool), so the sender must not reuse
// it (see ownedByCodec).
type codec struct{ encoding.CodecV2 }

func newCodec() codec { return codec{encoding.GetCodecV2(proto.Name)} }

// outputChunk returns the field number and data of an output event the
// codec sends without copying.
func outputChunk(v any) (protowire.Number, []byte) {
	ev, ok := v.(*agentv1.ExecEvent)
	if !ok {
		return 0, nil
	}
	switch e := ev.GetEvent().(type) {
	case *agentv1.ExecEvent_Stdout:
		if ownedByCodec(e.Stdout) {
			return 2, e.Stdout
		}
	case *agentv1.ExecEvent_Stderr:
		if ownedByCodec(e.Stderr) {
			return 3, e.Stderr
		}
	}
	return 0, nil
}

// ownedByCodec reports whether Send hands data itself to gRPC, which frees
// it to freeBufs when written.
func ownedByCodec(data []byte) bool {
	return len(data) >= zeroCopyMin && cap(data) == bufSize
}

func (c codec) Marshal(v any) (mem.BufferSlice, error) {
	num, data := outputChunk(v)
	if data == nil {
		return c.CodecV2.Marshal(v)
	}
	hdr := make([]byte, 0, 1+protowire.SizeVarint(uint64(len(data))))
	hdr = protowire.AppendTag(hdr, num, protowire.BytesType)
	hdr = protowire.AppendVarint(hdr, uint64(len(data)))
	return mem.BufferSlice{mem.SliceBuffer(hdr), mem.NewBuffer(&data, outputPool{})}, nil
}

// outputPool takes back output buffers gRPC is done with.
type outputPool struct{}

func (outputPool) Get(n int) *[]byte {
	b := make([]byte, n)
	return &b
}

func (outputPool) Put(b *[]byte) { putBuf(*b) }
