package execwire

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	agentv1 "github.com/airlock-sandbox/airlock/guest/api/agent/v1"
)

// Agent calls travel on streams to api.PortAgent: the host sends a
// KindRequest frame (agentv1.AgentRequest), the guest answers with one
// KindEvent frame (agentv1.AgentResponse), and the host may then send its
// next call on the same stream, one call at a time: the host keeps one
// stream for all its calls instead of opening one per call (a round trip
// of the transport less each). Either side ends the stream by closing it;
// the host closes it to abandon a call, which also keeps a late answer
// from being taken for the next call's.

// CallTimeout bounds how long the guest waits for a stream's first
// request, and then for each answer to be written: a host that dials and
// stalls holds a goroutine no longer. Between calls a stream waits for the
// host as long as the host keeps it.
const CallTimeout = 10 * time.Second

// Agent answers the agent calls.
type Agent interface {
	Info(context.Context, *agentv1.InfoRequest) (*agentv1.InfoResponse, error)
	SetTime(context.Context, *agentv1.SetTimeRequest) (*agentv1.SetTimeResponse, error)
	TrustCA(context.Context, *agentv1.TrustCARequest) (*agentv1.TrustCAResponse, error)
	Shutdown(context.Context, *agentv1.ShutdownRequest) (*agentv1.ShutdownResponse, error)
}

// UnimplementedAgent answers every call with Unimplemented; an Agent that
// embeds it answers only what it implements.
type UnimplementedAgent struct{}

func (UnimplementedAgent) Info(context.Context, *agentv1.InfoRequest) (*agentv1.InfoResponse, error) {
	return nil, agentv1.Errorf(agentv1.Code_UNIMPLEMENTED, "info is not implemented")
}

func (UnimplementedAgent) SetTime(context.Context, *agentv1.SetTimeRequest) (*agentv1.SetTimeResponse, error) {
	return nil, agentv1.Errorf(agentv1.Code_UNIMPLEMENTED, "set_time is not implemented")
}

func (UnimplementedAgent) TrustCA(context.Context, *agentv1.TrustCARequest) (*agentv1.TrustCAResponse, error) {
	return nil, agentv1.Errorf(agentv1.Code_UNIMPLEMENTED, "trust_ca is not implemented")
}

func (UnimplementedAgent) Shutdown(context.Context, *agentv1.ShutdownRequest) (*agentv1.ShutdownResponse, error) {
	return nil, agentv1.Errorf(agentv1.Code_UNIMPLEMENTED, "shutdown is not implemented")
}

// ServeAgent answers the agent calls whose streams arrive on l, each
// stream in its own goroutine, until l is closed (nil) or fails. A panic in
// a call is answered with Internal, after onPanic (when not nil) has seen
// it.
func ServeAgent(l net.Listener, a Agent, onPanic func(call string, r any)) error {
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		go serveCalls(c, a, onPanic)
	}
}

// serveCalls answers the calls of one stream in order until the host ends
// it or breaks the protocol. A reader takes the requests, so that the
// stream's end, which is how the host abandons a call, ends the running
// call's context.
func serveCalls(c net.Conn, a Agent, onPanic func(string, any)) {
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reqs := make(chan *agentv1.AgentRequest)
	go func() {
		defer cancel()
		defer close(reqs)
		r := NewReader(c)
		_ = c.SetReadDeadline(time.Now().Add(CallTimeout))
		for first := true; ; first = false {
			req := new(agentv1.AgentRequest)
			k, n, err := r.Next()
			if err == nil && k != KindRequest {
				err = fmt.Errorf("%w: a %s frame from the host", ErrFrame, k)
			}
			if err == nil {
				err = r.Message(n, req)
			}
			if err != nil {
				return // nobody to answer: the host went or broke the protocol
			}
			if first {
				_ = c.SetReadDeadline(time.Time{})
			}
			select {
			case reqs <- req:
			case <-ctx.Done():
				return
			}
		}
	}()
	var b []byte
	for req := range reqs {
		resp := Dispatch(ctx, a, req, onPanic)
		var err error
		b, err = AppendMessage(b[:0], KindEvent, resp)
		if err != nil {
			b, _ = AppendMessage(b[:0], KindEvent, errorResponse(agentv1.Errorf(agentv1.Code_INTERNAL, "agent: answer: %v", err)))
		}
		_ = c.SetWriteDeadline(time.Now().Add(CallTimeout))
		if _, err := c.Write(b); err != nil {
			return
		}
		if r, ok := a.(Replied); ok {
			r.Replied(req)
		}
	}
}

// Replied is an Agent that is told when its answer to a call has been
// written to the transport (the guest's agent powers off only once its
// Shutdown answer is on its way, instead of after a fixed delay). It is
// not called when the answer could not be written.
type Replied interface {
	Replied(req *agentv1.AgentRequest)
}

// Dispatch answers one call with a: its result, or the error it returned
// (Unimplemented for a call this agent does not know, Internal for a
// panic).
func Dispatch(ctx context.Context, a Agent, req *agentv1.AgentRequest, onPanic func(call string, r any)) (resp *agentv1.AgentResponse) {
	name := "unknown"
	defer func() {
		if r := recover(); r != nil {
			if onPanic != nil {
				onPanic(name, r)
			}
			resp = errorResponse(agentv1.Errorf(agentv1.Code_INTERNAL, "agent: internal error in %s", name))
		}
	}()
	var err error
	resp = new(agentv1.AgentResponse)
	switch call := req.GetCall().(type) {
	case *agentv1.AgentRequest_Info:
		name = "Info"
		var r *agentv1.InfoResponse
		if r, err = a.Info(ctx, call.Info); err == nil {
			resp.Result = &agentv1.AgentResponse_Info{Info: nonNil(r)}
		}
	case *agentv1.AgentRequest_SetTime:
		name = "SetTime"
		var r *agentv1.SetTimeResponse
		if r, err = a.SetTime(ctx, call.SetTime); err == nil {
			resp.Result = &agentv1.AgentResponse_SetTime{SetTime: nonNil(r)}
		}
	case *agentv1.AgentRequest_TrustCa:
		name = "TrustCA"
		var r *agentv1.TrustCAResponse
		if r, err = a.TrustCA(ctx, call.TrustCa); err == nil {
			resp.Result = &agentv1.AgentResponse_TrustCa{TrustCa: nonNil(r)}
		}
	case *agentv1.AgentRequest_Shutdown:
		name = "Shutdown"
		var r *agentv1.ShutdownResponse
		if r, err = a.Shutdown(ctx, call.Shutdown); err == nil {
			resp.Result = &agentv1.AgentResponse_Shutdown{Shutdown: nonNil(r)}
		}
	default:
		// A call from a newer host (a oneof field this agent does not
		// know) or none at all.
		err = agentv1.Errorf(agentv1.Code_UNIMPLEMENTED, "agent: unknown call")
	}
	if err != nil {
		return errorResponse(err)
	}
	return resp
}

func errorResponse(err error) *agentv1.AgentResponse {
	return &agentv1.AgentResponse{Result: &agentv1.AgentResponse_Error{Error: agentv1.FromError(err)}}
}

// nonNil makes an answer of nil, which a handler may return with no
// error, an empty message: a oneof member must be set to be sent.
func nonNil[T any, P interface{ *T }](p P) P {
	if p == nil {
		return new(T)
	}
	return p
}
