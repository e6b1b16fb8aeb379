// Package client is the host's side of the guest agent contract: one Client
// speaks agent/v1 over whatever connection a backend produces (vsock, Hyper-V
// socket, or a multiplexed virtio-serial stream). Everything the guest sends
// is treated as untrusted: message sizes are bounded and a misbehaving agent
// yields errors, never panics.
package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock/guest/api"
	agentv1 "github.com/airlock-sandbox/airlock/guest/api/agent/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// MaxMessageSize bounds every message the host accepts from the guest.
const MaxMessageSize = 4 << 20

// DialFunc opens a new stream to a port of the guest (api.PortAgent,
// api.PortExec).
type DialFunc func(ctx context.Context, port uint32) (net.Conn, error)

// Client is a connection to one guest agent: a gRPC connection for the
// Agent service, and a stream of its own per task. It is safe for
// concurrent use.
type Client struct {
	conn     *grpc.ClientConn
	rpc      agentv1.AgentClient
	dial     DialFunc
	connects atomic.Int64
}

// New returns a client that reaches the agent through dial. It does not
// connect until the first call.
func New(dial DialFunc) (*Client, error) {
	c := &Client{dial: dial}
	conn, err := grpc.NewClient("passthrough:///airlock-guest",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			nc, err := dial(ctx, api.PortAgent)
			if err == nil {
				c.connects.Add(1)
			}
			return nc, err
		}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageSize)),
		// Static flow-control windows, large enough that task output never
		// waits for a window update; setting them also turns off the BDP
		// estimator's pings, each a round trip over the transport.
		grpc.WithInitialWindowSize(agentv1.StreamWindow),
		grpc.WithInitialConnWindowSize(agentv1.ConnWindow),
		grpc.WithReadBufferSize(agentv1.IOBufferSize),
		grpc.WithWriteBufferSize(agentv1.IOBufferSize),
		// The transport is a local stream; reconnect fast if the agent restarts.
		grpc.WithConnectParams(fastReconnect),
	)
	if err != nil {
		return nil, fmt.Errorf("agent client: %w", err)
	}
	c.conn, c.rpc = conn, agentv1.NewAgentClient(conn)
	return c, nil
}

// Connects is how many connections to the agent the client has made. The
// first call makes one; each further one means the previous connection
// broke and the client reached the agent again: on a running VM, that the
// guest restarted its agent.
func (c *Client) Connects() int { return int(c.connects.Load()) }

// Close releases the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Info reports the guest's state.
func (c *Client) Info(ctx context.Context) (*agentv1.InfoResponse, error) {
	r, err := c.rpc.Info(ctx, &agentv1.InfoRequest{})
	if err != nil {
		return nil, fmt.Errorf("agent info: %w", err)
	}
	return r, nil
}

// SetTime sets the guest's wall clock.
func (c *Client) SetTime(ctx context.Context, t time.Time) error {
	if _, err := c.rpc.SetTime(ctx, &agentv1.SetTimeRequest{UnixNanos: t.UnixNano()}); err != nil {
		return fmt.Errorf("agent set time: %w", err)
	}
	return nil
}

// Shutdown asks the guest to power off (or reboot). The agent answers before
// it powers off; the caller then waits for the machine to stop.
func (c *Client) Shutdown(ctx context.Context, reboot bool) error {
	if _, err := c.rpc.Shutdown(ctx, &agentv1.ShutdownRequest{Reboot: reboot}); err != nil {
		return fmt.Errorf("agent shutdown: %w", err)
	}
	return nil
}

// ErrNoExit means the agent ended a task's stream without an exit status.
var ErrNoExit = errors.New("guest agent ended the task without an exit status")
