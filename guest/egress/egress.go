// Package egress is the guest half of Airlock's egress path: it listens on
// the guest's loopback, where tasks find their HTTP proxy (127.0.0.1:3128)
// and SOCKS5 proxy (127.0.0.1:1080), and carries every accepted TCP
// connection to the host gate over the transport, one stream per
// connection, byte for byte. It parses nothing: the proxy protocols, the
// per-task credentials in them and every policy decision belong to the
// host (app/egress), which listens on api.PortEgressHTTP and
// api.PortEgressSOCKS of the transport.
//
// A forwarded connection is copied both ways with half-close (EOF on one
// side becomes CloseWrite on the other) and is closed on both sides as soon
// as either side fails. The stream to the host is framed
// (guest/api/egresswire), so a half-close reaches the host as a message of
// its own on every transport, whether or not the transport can half-close. The number of connections in flight is capped (new
// ones beyond it are reset at once), dialling the host is bounded by a
// timeout, and a connection the host refuses (no listener on the port) is
// reset at once, so a client sees an error, never a hang.
//
// With Config.Tasks, the forwarder also reads (and passes on unchanged)
// the first bytes of each connection for the task's proxy credential, so
// that one task cannot take every connection (see Tasks). A connection
// that carries no byte either way for Config.IdleTimeout is closed.
package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock/guest/api"
	"github.com/airlock-sandbox/airlock/guest/api/egresswire"
)

// Where the guest's proxies listen. The task environment the host sends
// (HTTP_PROXY and friends) points here.
const (
	HTTPAddr  = "127.0.0.1:3128"
	SOCKSAddr = "127.0.0.1:1080"
)

// Defaults for Config's zero fields.
const (
	// DefaultMaxConns caps the forwarded connections in flight, both
	// proxies together: as many as the host's gate serves for one guest
	// (app/egress.DefaultMaxConns). Each costs two goroutines, two 32 KiB
	// copy buffers and one transport stream, ~70 MiB for all of them,
	// paid only while a task holds them.
	DefaultMaxConns = 1024
	// DefaultDialTimeout bounds opening the stream to the host. Opening a
	// stream is local to the VM boundary, so it normally takes
	// microseconds; the timeout only matters when the host is wedged.
	DefaultDialTimeout = 10 * time.Second
	// DefaultTaskConns is one task's share of DefaultMaxConns (with
	// Config.Tasks): a quarter, so a task that takes all of its own, and
	// the share of connections without a known credential, and every
	// pending one, still leaves a quarter to the others, and more
	// connections than a build's parallel downloads use.
	DefaultTaskConns = DefaultMaxConns / 4
	// DefaultPendingConns bounds the connections whose credential has
	// not arrived yet; beyond it the oldest is closed. Honest clients
	// send theirs with their first write, but a task that starts two
	// hundred downloads at once can have all of them connected and not
	// yet written on a busy guest. A quarter, like a task's share.
	DefaultPendingConns = DefaultMaxConns / 4
	// DefaultHeadTimeout bounds how long a connection may take to show
	// its credential. Clients send it with their first write, but on a
	// guest busy with hundreds of processes under emulation a client can
	// wait many seconds between its connect and that write (tests/robust
	// TestLoad's 200 downloads at once lose early ones to a 15 s bound).
	// Silent connections
	// cost no one else meanwhile: PendingConns closes the oldest when
	// more wait. It is above the host's own deadline for a request head
	// (app/egress.DefaultHeaderTimeout, 10 s from its first byte), so a
	// slow head is cut off, and logged, by the host.
	DefaultHeadTimeout = 2 * time.Minute
	// DefaultIdleTimeout closes a connection that carried no byte either
	// way for that long, so connections a task forgot do not hold its
	// share (and a transport stream, two goroutines and their buffers)
	// for ever. It is far above the idle time of any client's pooled
	// connection (Go's and curl's drop theirs after 90 s and 118 s, as
	// the host's gate does after 90 s between requests) and the quiet of
	// a long poll, which servers answer within a few minutes; a quiet SSH
	// session through the SOCKS proxy needs ServerAliveInterval.
	DefaultIdleTimeout = 10 * time.Minute
)

// DialFunc opens a stream to port on the host (transport.DialHost).
type DialFunc func(ctx context.Context, port uint32) (net.Conn, error)

// Route is one guest listener and the host port its connections go to.
type Route struct {
	Addr string // loopback host:port in the guest
	Port uint32 // transport port on the host
}

// DefaultRoutes are the guest's two proxies.
func DefaultRoutes() []Route {
	return []Route{
		{Addr: HTTPAddr, Port: api.PortEgressHTTP},
		{Addr: SOCKSAddr, Port: api.PortEgressSOCKS},
	}
}

// Config configures a Forwarder.
type Config struct {
	// Dial opens a stream to the host; required.
	Dial DialFunc
	// MaxConns caps the connections in flight (DefaultMaxConns if zero).
	MaxConns int
	// DialTimeout bounds Dial (DefaultDialTimeout if zero).
	DialTimeout time.Duration
	// Tasks, when set, are the credentials of the running tasks: each
	// task, and the connections without a known credential together,
	// get at most TaskConns connections (DefaultTaskConns, at most
	// MaxConns, if zero). A connection's credential must arrive within
	// HeadTimeout (DefaultHeadTimeout if zero), and at most PendingConns
	// (DefaultPendingConns if zero) wait for theirs.
	Tasks        *Tasks
	TaskConns    int
	PendingConns int
	HeadTimeout  time.Duration
	// IdleTimeout closes a connection that carried nothing either way
	// for that long (DefaultIdleTimeout if zero).
	IdleTimeout time.Duration
	// Logger receives debug records, one per connection at most; nil
	// discards them.
	Logger *slog.Logger
}

// Forwarder carries connections accepted on guest listeners to the host.
// One Forwarder may serve several listeners; MaxConns counts them all.
type Forwarder struct {
	cfg    Config
	log    *slog.Logger
	slots  chan struct{}
	active atomic.Int64
	shares *shares // nil without Config.Tasks
}

// New returns a Forwarder for cfg.
func New(cfg Config) *Forwarder {
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.TaskConns <= 0 {
		cfg.TaskConns = DefaultTaskConns
	}
	cfg.TaskConns = min(cfg.TaskConns, cfg.MaxConns)
	if cfg.PendingConns <= 0 {
		cfg.PendingConns = DefaultPendingConns
	}
	if cfg.HeadTimeout <= 0 {
		cfg.HeadTimeout = DefaultHeadTimeout
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	f := &Forwarder{cfg: cfg, log: cfg.Logger, slots: make(chan struct{}, cfg.MaxConns)}
	if cfg.Tasks != nil {
		f.shares = &shares{max: cfg.TaskConns, maxPending: cfg.PendingConns, perTask: map[string]int{}}
	}
	return f
}

// Active is the number of connections in flight (accepted and not yet
// closed on both sides).
func (f *Forwarder) Active() int { return int(f.active.Load()) }

// Listen binds every route's address, which must be a loopback IP address
// with a port: the proxies never listen anywhere else. On error nothing
// stays bound. On Linux the sockets are bound with IP_FREEBIND, so the
// agent can bind them while init is still bringing the loopback device up
// (a boot's critical path; see guest/agent.Run): 127.0.0.1 exists only
// once lo is up, and connections reach the listeners from then on.
func Listen(routes []Route) ([]net.Listener, error) {
	var ls []net.Listener
	lc := net.ListenConfig{Control: freeBind}
	for _, r := range routes {
		ap, err := netip.ParseAddrPort(r.Addr)
		if err != nil || !ap.Addr().IsLoopback() || ap.Port() == 0 {
			closeAll(ls)
			return nil, fmt.Errorf("egress: %q is not a loopback address with a port", r.Addr)
		}
		l, err := lc.Listen(context.Background(), "tcp", r.Addr)
		if err != nil {
			closeAll(ls)
			return nil, fmt.Errorf("egress: %w", err)
		}
		ls = append(ls, l)
	}
	return ls, nil
}

func closeAll(ls []net.Listener) {
	for _, l := range ls {
		l.Close()
	}
}

// Start binds routes (see Listen) and serves each in the background until
// ctx is done. It returns once every listener is bound; wait blocks until
// they are closed and every connection they accepted is gone.
func (f *Forwarder) Start(ctx context.Context, routes []Route) (wait func(), err error) {
	ls, err := Listen(routes)
	if err != nil {
		return nil, err
	}
	return f.ServeAll(ctx, ls, routes), nil
}

// ServeAll serves ls[i] (bound by Listen) for routes[i] in the background
// until ctx is done; wait is as Start's.
func (f *Forwarder) ServeAll(ctx context.Context, ls []net.Listener, routes []Route) (wait func()) {
	var wg sync.WaitGroup
	for i, l := range ls {
		wg.Go(func() {
			if err := f.Serve(ctx, l, routes[i].Port); err != nil {
				f.log.Error("egress listener stopped", "addr", routes[i].Addr, "err", err)
			}
		})
	}
	return wg.Wait
}

// Serve accepts connections on l and forwards each to port on the host,
// until ctx is done (nil) or l fails (its error). It closes l, and returns
// only when every connection it accepted is closed and their goroutines
// have ended.
func (f *Forwarder) Serve(ctx context.Context, l net.Listener, port uint32) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	defer l.Close()
	var backoff time.Duration
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			// EMFILE, ENFILE, ECONNABORTED: the listener is fine, the
			// moment is not. Back off as net/http does.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			f.log.Debug("egress accept", "err", err, "retry_in", backoff)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(backoff):
			}
			continue
		}
		backoff = 0
		select {
		case f.slots <- struct{}{}:
		default:
			f.log.Debug("egress: too many connections; reset", "max", f.cfg.MaxConns, "port", port)
			reset(c)
			continue
		}
		f.active.Add(1)
		wg.Go(func() {
			defer func() {
				f.active.Add(-1)
				<-f.slots
			}()
			f.forward(ctx, c, port)
		})
	}
}

// forward carries c to port on the host and returns when both are closed.
func (f *Forwarder) forward(ctx context.Context, c net.Conn, port uint32) {
	start := time.Now()
	var pend *pendingConn
	if f.shares != nil {
		pend = f.shares.wait(closer(c))
	}
	dctx, cancel := context.WithTimeout(ctx, f.cfg.DialTimeout)
	hc, err := f.cfg.Dial(dctx, port)
	cancel()
	if err != nil {
		if pend != nil {
			f.shares.leave(pend)
		}
		f.log.Debug("egress: host refused; reset", "port", port, "err", err)
		reset(c)
		return
	}
	h := egresswire.Client(hc)
	closeBoth := func() {
		c.Close()
		h.Close()
	}
	stop := context.AfterFunc(ctx, closeBoth)
	defer stop()

	var moved atomic.Int64 // reads either way, for the idle check
	idle := f.idleCheck(&moved, closeBoth)
	defer idle.Stop()

	var up int64
	var upErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		if pend != nil {
			// The credential comes first (the host's answers flow
			// meanwhile); the read that settled it follows once
			// admitted.
			head := time.AfterFunc(f.cfg.HeadTimeout, closeBoth)
			user, pass, found, rest := identify(c, h, port)
			head.Stop()
			key := f.cfg.Tasks.share(user, pass, found)
			if !f.shares.admit(pend, key) {
				f.log.Debug("egress: no room in the task's share; reset", "max", f.cfg.TaskConns, "port", port, "task", key)
				reset(c)
				h.Close()
				upErr = errShareFull
				return
			}
			defer f.shares.release(key)
			if len(rest) > 0 {
				if _, upErr = h.Write(rest); upErr != nil {
					closeBoth()
					return
				}
			}
		}
		up, upErr = pipe(h, activity{c, &moved})
	}()
	down, downErr := pipe(c, activity{h, &moved})
	<-done
	c.Close()
	h.Close()
	f.log.Debug("egress connection", "port", port, "up", up, "down", down,
		"took", time.Since(start).Round(time.Millisecond), "up_err", upErr, "down_err", downErr)
}

var errShareFull = errors.New("egress: the task's share of connections is full")

// idleCheck closes a connection (closeBoth) once moved has not changed for
// a whole IdleTimeout, looking once per IdleTimeout: a connection is
// closed after between one and two of them without a byte.
func (f *Forwarder) idleCheck(moved *atomic.Int64, closeBoth func()) *time.Timer {
	var t *time.Timer
	var mu sync.Mutex
	last := int64(-1)
	mu.Lock()
	defer mu.Unlock()
	t = time.AfterFunc(f.cfg.IdleTimeout, func() {
		mu.Lock()
		defer mu.Unlock()
		if n := moved.Load(); n != last {
			last = n
			t.Reset(f.cfg.IdleTimeout)
			return
		}
		f.log.Debug("egress: connection idle; closed", "idle", f.cfg.IdleTimeout)
		closeBoth()
	})
	return t
}

// activity is a connection whose reads count in n.
type activity struct {
	net.Conn
	n *atomic.Int64
}

// Read counts each call: a connection where bytes move keeps calling it.
func (a activity) Read(b []byte) (int, error) {
	a.n.Add(1)
	return a.Conn.Read(b)
}

type closeWriter interface{ CloseWrite() error }

// copyBufs are the buffers of pipe: 256 KiB moves a download in few reads,
// writes and transport frames, which cost far more than memory in a VM.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}

// pipe copies src to dst until src's EOF, which it passes on as dst's
// CloseWrite. On any failure it closes both, which also ends the copy in
// the other direction.
func pipe(dst, src net.Conn) (int64, error) {
	var n int64
	var err error
	if fw, ok := dst.(*egresswire.Conn); ok {
		// Reads straight into the record it sends.
		n, err = fw.ReadFrom(src)
	} else {
		bp := copyBufs.Get().(*[]byte)
		// Hide ReadFrom/WriteTo: a TCP connection's fallback copies in
		// 32 KiB steps, and every step is a syscall and a transport frame.
		n, err = io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, *bp)
		copyBufs.Put(bp)
	}
	if err == nil {
		if cw, ok := dst.(closeWriter); ok {
			err = cw.CloseWrite()
		} else {
			err = errors.New("egress: connection cannot half-close")
		}
	}
	if err != nil {
		dst.Close()
		src.Close()
	}
	return n, err
}

// reset closes c so that its peer sees a reset, not an orderly EOF: the
// connection was never carried anywhere.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	c.Close()
}
