package execwire

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"

	agentv1 "github.com/airlock-sandbox/airlock/guest/api/agent/v1"
)

// Stream is the guest's end of one task's stream. Recv is for one
// goroutine; Send, SendOutput and SendError may be called from any, one at
// a time each frame.
type Stream struct {
	conn   net.Conn
	r      *Reader
	ctx    context.Context
	cancel context.CancelFunc

	wmu  sync.Mutex
	wbuf []byte
	hdr  [HeaderSize]byte // a spliced frame's header
	kind Kind             // a spliced frame's kind
	setN func(n int)      // writes hdr for kind and n bytes
}

// NewStream wraps an accepted connection on api.PortExec.
func NewStream(c net.Conn) *Stream {
	ctx, cancel := context.WithCancel(context.Background())
	return &Stream{conn: c, r: NewReader(c), ctx: ctx, cancel: cancel}
}

// Context ends when the host has gone: Recv failed (the host closed the
// stream, which abandons the task) or the stream was closed.
func (s *Stream) Context() context.Context { return s.ctx }

// Recv reads the host's next request.
func (s *Stream) Recv() (*agentv1.ExecRequest, error) {
	req := new(agentv1.ExecRequest)
	k, n, err := s.r.Next()
	if err == nil && k != KindRequest {
		err = fmt.Errorf("%w: a %s frame from the host", ErrFrame, k)
	}
	if err == nil {
		err = s.r.Message(n, req)
	}
	if err != nil {
		s.cancel()
		return nil, err
	}
	return req, nil
}

// Send writes one event.
func (s *Stream) Send(ev *agentv1.ExecEvent) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	b, err := AppendMessage(s.wbuf[:0], KindEvent, ev)
	if err != nil {
		return err
	}
	s.wbuf = b
	_, err = s.conn.Write(b)
	return err
}

// SendOutput writes framed[HeaderSize:] as one output frame of kind k,
// using framed[:HeaderSize] for the header: one write, no copy.
func (s *Stream) SendOutput(k Kind, framed []byte) error {
	n := len(framed) - HeaderSize
	if n > MaxPayload {
		return fmt.Errorf("%w: %d bytes of %s in one frame, larger than max %d", ErrFrame, n, k, MaxPayload)
	}
	PutHeader(framed, k, n)
	s.wmu.Lock()
	defer s.wmu.Unlock()
	_, err := s.conn.Write(framed)
	return err
}

// pipeWriter is the stream of a transport that moves bytes from a pipe
// without copying them (mux.PipeWriter, on the guest's serial port).
type pipeWriter interface {
	WritePipe(head []byte, setLen func(n int), pipe syscall.RawConn, avail int) (int, error)
}

// SpliceOutput sends one output frame of kind k whose payload, at most
// avail bytes (as many as the transport's flow control lets go at once),
// moves from the pipe behind pipe to the transport without passing through
// the agent; the pipe must hold avail bytes and have no other reader. It
// returns how many bytes it sent. Where the transport cannot do that it
// returns an error matching errors.ErrUnsupported, having sent and
// consumed nothing; avail 0 asks only that.
func (s *Stream) SpliceOutput(k Kind, pipe syscall.RawConn, avail int) (int, error) {
	pw, ok := s.conn.(pipeWriter)
	if !ok {
		return 0, fmt.Errorf("execwire: the stream cannot splice: %w", errors.ErrUnsupported)
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.setN == nil {
		s.setN = func(n int) { PutHeader(s.hdr[:], s.kind, n) }
	}
	s.kind = k
	return pw.WritePipe(s.hdr[:], s.setN, pipe, min(avail, MaxPayload))
}

// SendError reports why the task could not run: err's code and message
// (agentv1.FromError).
func (s *Stream) SendError(err error) error {
	return s.Send(&agentv1.ExecEvent{Event: &agentv1.ExecEvent_Error{Error: agentv1.FromError(err)}})
}

// Close ends the stream.
func (s *Stream) Close() error {
	s.cancel()
	return s.conn.Close()
}

// Serve accepts task streams on l and runs handle for each in its own
// goroutine: an error it returns goes to the host as the task's Error
// event. Serve returns when l fails; handlers still running are not
// waited for.
func Serve(l net.Listener, handle func(*Stream) error) error {
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		go func() {
			s := NewStream(c)
			defer s.Close()
			if err := handle(s); err != nil {
				s.SendError(err)
			}
		}()
	}
}
