package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/guest/api"
	agentv1 "github.com/airlock-sandbox/airlock/guest/api/agent/v1"
	"github.com/airlock-sandbox/airlock/guest/api/execwire"
)

// Bounds on a layer call's stream: the guest may be hostile or stuck.
const (
	// LayerIdleTimeout is the longest the guest may send nothing while an
	// export streams (a layer of many GiB takes minutes under emulation,
	// but never a pause this long between two frames).
	LayerIdleTimeout = 60 * time.Second
	// ForgetTimeout bounds a forget, which removes files from the guest's
	// layer disk and drops the overlay's cached entries.
	ForgetTimeout = 2 * time.Minute
	// maxGuestMessage bounds a guest's error message as the host passes it on.
	maxGuestMessage = 1024
)

// ExportLayer streams the guest's changes layer (the upper layer of the
// overlay at /workspace, in a sandbox booted with changes held) as a tar
// in the OCI layer format: a deleted path is an empty ".wh.NAME", a folder
// that hides the shared folder's holds ".wh..wh..opq". The stream ends
// with io.EOF only when the guest sent all of it; the caller closes it.
//
// The bytes are the guest's: the caller bounds how much it takes and
// checks every entry. The stream fails when the guest sends nothing for
// LayerIdleTimeout, breaks the protocol, reports a failure (the guest's
// *agentv1.Error), or says it sent a length other than what
// arrived; and when ctx ends.
func (c *Client) ExportLayer(ctx context.Context) (io.ReadCloser, error) {
	conn, err := c.layerCall(ctx, &agentv1.LayerRequest{Call: &agentv1.LayerRequest_Export{Export: &agentv1.LayerExportRequest{}}})
	if err != nil {
		return nil, err
	}
	lr := &layerReader{ctx: ctx, conn: conn, r: execwire.NewReader(conn)}
	lr.stop = context.AfterFunc(ctx, func() { conn.Close() })
	return lr, nil
}

// ForgetLayer removes paths (slash-separated, relative to /workspace; all
// when none) from the changes layer, so /workspace shows the shared
// folder's own version there again.
func (c *Client) ForgetLayer(ctx context.Context, paths []string) error {
	ctx, cancel := context.WithTimeout(ctx, ForgetTimeout)
	defer cancel()
	req := &agentv1.LayerRequest{Call: &agentv1.LayerRequest_Forget{Forget: &agentv1.LayerForgetRequest{Paths: paths}}}
	conn, err := c.layerCall(ctx, req)
	if err != nil {
		return err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	r := execwire.NewReader(conn)
	k, n, err := r.Next()
	if err == nil && k != execwire.KindEvent {
		err = fmt.Errorf("%w: a %s frame answering a forget", execwire.ErrFrame, k)
	}
	resp := new(agentv1.LayerResponse)
	if err == nil {
		err = r.Message(n, resp)
	}
	if err != nil {
		return layerErr(ctx, "forget", err)
	}
	return layerResult(resp)
}

// layerCall dials api.PortLayer and sends req.
func (c *Client) layerCall(ctx context.Context, req *agentv1.LayerRequest) (net.Conn, error) {
	b, err := execwire.AppendMessage(nil, execwire.KindRequest, req)
	if err != nil {
		return nil, fmt.Errorf("client: layer: %w", err)
	}
	conn, err := c.dial(ctx, api.PortLayer)
	if err != nil {
		return nil, layerErr(ctx, "dial", err)
	}
	if d, ok := ctx.Deadline(); ok {
		_ = conn.SetWriteDeadline(d)
	} else {
		_ = conn.SetWriteDeadline(time.Now().Add(LayerIdleTimeout))
	}
	if _, err := conn.Write(b); err != nil {
		conn.Close()
		return nil, layerErr(ctx, "send", err)
	}
	_ = conn.SetWriteDeadline(time.Time{})
	return conn, nil
}

// layerReader is an export's tar: the payloads of the guest's data frames,
// up to its final LayerResponse.
type layerReader struct {
	ctx  context.Context
	conn net.Conn
	r    *execwire.Reader
	stop func() bool

	left     int    // payload bytes of the current data frame not yet read
	received uint64 // payload bytes read
	err      error  // sticky: io.EOF after a good end
	once     sync.Once
}

func (l *layerReader) Read(p []byte) (int, error) {
	for l.err == nil && l.left == 0 {
		l.err = l.next()
	}
	if l.err != nil {
		return 0, l.err
	}
	if len(p) > l.left {
		p = p[:l.left]
	}
	_ = l.conn.SetReadDeadline(time.Now().Add(LayerIdleTimeout))
	n, err := io.ReadFull(l.conn, p)
	l.left -= n
	l.received += uint64(n)
	if err != nil {
		l.err = layerErr(l.ctx, "export", fmt.Errorf("%w: the stream ended inside a frame (%v)", execwire.ErrFrame, err))
		return n, l.err
	}
	return n, nil
}

// next reads the next frame's header: a data frame's payload is read by
// Read; the final answer ends the stream.
func (l *layerReader) next() error {
	_ = l.conn.SetReadDeadline(time.Now().Add(LayerIdleTimeout))
	k, n, err := l.r.Next()
	if err == io.EOF {
		return layerErr(l.ctx, "export", fmt.Errorf("%w: the stream ended before the export's end", execwire.ErrFrame))
	}
	if err != nil {
		return layerErr(l.ctx, "export", err)
	}
	switch k {
	case execwire.KindStdout:
		l.left = n
		return nil
	case execwire.KindEvent:
		resp := new(agentv1.LayerResponse)
		if err := l.r.Message(n, resp); err != nil {
			return layerErr(l.ctx, "export", err)
		}
		if err := layerResult(resp); err != nil {
			return err
		}
		if got, said := l.received, resp.GetDone().GetBytes(); got != said {
			return fmt.Errorf("client: export: %w: the guest sent %d bytes of tar and said %d", execwire.ErrFrame, got, said)
		}
		return io.EOF
	}
	return layerErr(l.ctx, "export", fmt.Errorf("%w: a %s frame in an export", execwire.ErrFrame, k))
}

func (l *layerReader) Close() error {
	l.once.Do(func() {
		l.stop()
		l.conn.Close()
		if l.err == nil {
			l.err = errors.New("client: export: closed")
		}
	})
	return nil
}

// layerResult is the guest's answer as an error: nil when done, else the
// guest's Error (guestError).
func layerResult(resp *agentv1.LayerResponse) error {
	if e := resp.GetError(); e != nil {
		return guestError(e)
	}
	if resp.GetDone() == nil {
		return fmt.Errorf("client: layer: %w: an answer with no result", execwire.ErrFrame)
	}
	return nil
}

// layerErr says why a layer call's stream failed: the caller's context,
// the guest breaking the protocol, or the transport.
func layerErr(ctx context.Context, op string, err error) error {
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, execwire.ErrFrame):
		return fmt.Errorf("client: %s: %w", op, err)
	}
	return fmt.Errorf("%w: client: layer %s: %w", agentv1.ErrUnavailable, op, err)
}
