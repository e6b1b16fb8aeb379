package agentv1

// Transport tuning both ends of the agent connection use. The connection
// is one local stream (vsock, a Hyper-V socket or a mux stream), where
// every frame and every flow-control round trip costs guest CPU, so
// windows and buffers are large.
const (
	// StreamWindow is the HTTP/2 flow-control window of one call: task
	// output in flight before the reader must have consumed it. Setting it
	// also switches off gRPC's bandwidth estimator, whose pings each cost a
	// round trip.
	// It is also what the host may hold of one task's output that its
	// reader has not taken yet.
	StreamWindow = 1 << 20
	// ConnWindow is the window of the whole connection, shared by all calls.
	ConnWindow = 4 << 20
	// IOBufferSize is gRPC's read and write buffer on the connection: HTTP/2
	// frames are gathered into writes of up to this size.
	IOBufferSize = 256 << 10
)
