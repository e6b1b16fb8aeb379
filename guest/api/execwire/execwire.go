// Package execwire is how tasks and agent calls travel between host and
// guest. The host dials api.PortExec once per task; then both sides send
// frames on that stream until the task's exit status has gone by. Agent
// calls (Info, SetTime, TrustCA, Shutdown) go on a stream to api.PortAgent that the
// host keeps: an agentv1.AgentRequest in a KindRequest frame, an
// agentv1.AgentResponse in a KindEvent frame back, one call after another
// (see ServeAgent). A frame is a 5-byte
// header, the payload's kind and its length (big-endian uint32), then the
// payload:
//
//	host → guest  KindRequest  an agentv1.ExecRequest (start first)
//	guest → host  KindEvent    an agentv1.ExecEvent (started, exit, error)
//	guest → host  KindStdout   bytes the task wrote to stdout, as they are
//	guest → host  KindStderr   bytes the task wrote to stderr
//
// Output is not wrapped in protobuf or HTTP/2: under emulation every pass
// over a chunk in the guest costs about as much as moving it over the
// transport, and a task's round trip is a handful of these frames instead
// of an HTTP/2 stream's. The host never half-closes a task's stream:
// closing it means the task is abandoned, and the guest kills it.
package execwire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	agentv1 "github.com/airlock-sandbox/airlock/guest/api/agent/v1"
)

// HeaderSize is a frame header's length. A sender that reads output into
// a buffer after HeaderSize spare bytes sends it with one write.
const HeaderSize = 5

// MaxPayload bounds a frame's payload; either side refuses a larger one.
const MaxPayload = 4 << 20

// Kind says what a frame's payload is.
type Kind byte

const (
	KindRequest Kind = 1
	KindEvent   Kind = 2
	KindStdout  Kind = 3
	KindStderr  Kind = 4
)

func (k Kind) String() string {
	switch k {
	case KindRequest:
		return "request"
	case KindEvent:
		return "event"
	case KindStdout:
		return "stdout"
	case KindStderr:
		return "stderr"
	}
	return fmt.Sprintf("kind %d", byte(k))
}

// ErrFrame means the peer sent something that is not a frame of this
// protocol: an unknown kind or a payload over the limit. The stream is
// unusable after it.
var ErrFrame = errors.New("execwire: bad frame")

// PutHeader writes a header for a payload of n bytes of kind k into
// b[:HeaderSize].
func PutHeader(b []byte, k Kind, n int) {
	b[0] = byte(k)
	binary.BigEndian.PutUint32(b[1:HeaderSize], uint32(n))
}

// AppendMessage appends m as one frame of kind k to b.
func AppendMessage(b []byte, k Kind, m agentv1.Message) ([]byte, error) {
	n := m.SizeVT()
	if n > MaxPayload {
		return b, fmt.Errorf("%w: a %s of %d bytes, larger than max %d", ErrFrame, k, n, MaxPayload)
	}
	at := len(b)
	b = append(b, make([]byte, HeaderSize+n)...)
	if _, err := m.MarshalToSizedBufferVT(b[at+HeaderSize:]); err != nil {
		return b[:at], err
	}
	PutHeader(b[at:], k, n)
	return b, nil
}

// Reader reads frames. It holds one payload buffer, grown to the largest
// message read (at most MaxPayload), and no goroutine.
type Reader struct {
	r   io.Reader
	hdr [HeaderSize]byte
	buf []byte
}

// NewReader reads frames from r.
func NewReader(r io.Reader) *Reader { return &Reader{r: r} }

// Next reads the next frame's header and returns its kind and payload
// length; the caller then reads the payload with Payload or Copy. It
// returns io.EOF itself only when the stream ends cleanly between frames, and ErrFrame
// (wrapped) for a kind outside the protocol, an oversized payload or a
// stream that ends inside a frame.
func (r *Reader) Next() (Kind, int, error) {
	if _, err := io.ReadFull(r.r, r.hdr[:]); err != nil {
		if err == io.ErrUnexpectedEOF {
			return 0, 0, cutErr(err)
		}
		return 0, 0, err // io.EOF itself only for a clean end
	}
	k, n := Kind(r.hdr[0]), binary.BigEndian.Uint32(r.hdr[1:])
	if k < KindRequest || k > KindStderr {
		return 0, 0, fmt.Errorf("%w: unknown kind %d", ErrFrame, r.hdr[0])
	}
	if n > MaxPayload {
		return 0, 0, fmt.Errorf("%w: a %s frame of %d bytes, larger than max %d", ErrFrame, k, n, MaxPayload)
	}
	return k, int(n), nil
}

// Payload reads the current frame's n payload bytes. The slice is valid
// until the next call.
func (r *Reader) Payload(n int) ([]byte, error) {
	if cap(r.buf) < n {
		r.buf = make([]byte, n)
	}
	b := r.buf[:n]
	if _, err := io.ReadFull(r.r, b); err != nil {
		return nil, cutErr(err)
	}
	return b, nil
}

// Message reads the current frame's n payload bytes into m.
func (r *Reader) Message(n int, m agentv1.Message) error {
	b, err := r.Payload(n)
	if err != nil {
		return err
	}
	m.Reset()
	if err := m.UnmarshalVT(b); err != nil {
		return fmt.Errorf("%w: a malformed %T: %w", ErrFrame, m, err)
	}
	return nil
}

// WriteError is returned by Copy when the destination failed, as opposed
// to the stream.
type WriteError struct{ Err error }

func (e *WriteError) Error() string { return e.Err.Error() }
func (e *WriteError) Unwrap() error { return e.Err }

// Copy writes the current frame's n payload bytes to w through buf, which
// must not be empty: no allocation per frame. A failed write is a
// *WriteError; the rest of the payload is then still read, so the stream
// stays usable.
func (r *Reader) Copy(w io.Writer, n int, buf []byte) error {
	var werr error
	for n > 0 {
		m, err := r.r.Read(buf[:min(n, len(buf))])
		if m > 0 && werr == nil {
			_, werr = w.Write(buf[:m])
		}
		n -= m
		if err != nil && n > 0 {
			return cutErr(err)
		}
	}
	if werr != nil {
		return &WriteError{werr}
	}
	return nil
}

// cutErr says why a frame ended early: a stream that ends cleanly (io.EOF
// itself, not a transport error wrapping one) inside a frame is a peer
// breaking the protocol; any other error is the transport's.
func cutErr(err error) error {
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		return fmt.Errorf("%w: the stream ended inside a frame", ErrFrame)
	}
	return err
}
