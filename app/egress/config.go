package egress

import (
	"context"
	"crypto/x509"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/airlock-sandbox/airlock/app/egress/intercept"
)

// ErrClosed is returned by the Serve methods after Close.
var ErrClosed = errors.New("egress: gate closed")

// Resolver looks up the addresses of a name. *net.Resolver satisfies it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Dialer opens upstream connections. *net.Dialer satisfies it. The gate
// always passes an IP:port, never a name.
type Dialer interface {
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// Config configures a Gate. The zero value is a gate that denies everything.
type Config struct {
	// Allow and Deny are policy entries (see policy.ParseEntry); deny wins.
	Allow, Deny []string
	// MapHosts are NAME=ADDR pins (see policy.ParseMapHost).
	MapHosts []string
	// Resolver resolves names; nil means net.DefaultResolver.
	Resolver Resolver
	// Dialer dials upstreams; nil means a net.Dialer.
	Dialer Dialer
	// LogFile, if set, receives one JSON line per Decision (O_APPEND),
	// and is rotated to LogFile.1 (and so on, LogKeep of them) before it
	// grows past LogMaxBytes; 0 means DefaultLogMaxBytes.
	LogFile     string
	LogMaxBytes int64
	// Decider is asked when no rule matches; nil means deny.
	Decider Decider
	// Service says the gate serves the sandbox of `airlock serve`, whose
	// rules `airlock egress allow` changes: refusals suggest that command.
	// Otherwise it serves one run with a VM of its own, and refusals
	// suggest that run's flags (`airlock run --allow`).
	Service bool
	// AskTimeout bounds one Decide call; 0 means DefaultAskTimeout.
	AskTimeout time.Duration
	// RequireCredential refuses connections that carry no credential.
	// Without it such connections are decided with task "".
	RequireCredential bool
	// Limits bounds sizes and waits; zero fields take the defaults.
	Limits Limits
	// Logger receives operational messages; nil discards them.
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	// CA, when set, lets the gate terminate the guest's TLS for the hosts
	// of Secrets (and for every host with Inspect). Without it tunnels
	// are never opened and secrets cannot be added.
	CA *intercept.CA
	// Secrets are added on the way out (see intercept.Secret); SetSecrets replaces them.
	Secrets []intercept.Secret
	// Inspect terminates TLS for every host, not just those of a secret,
	// so placeholders are looked for everywhere. Needs CA.
	Inspect bool
	// UpstreamRoots verify real servers where the gate terminates TLS;
	// nil means the system's roots (see intercept.UpstreamRoots).
	UpstreamRoots *x509.CertPool
	// UpstreamProxy, if set (http://[user:pass@]host:port), is an HTTP
	// proxy every upstream connection goes through with CONNECT.
	UpstreamProxy string
}

// Limits bounds what a guest can make the gate hold or wait for.
type Limits struct {
	// MaxHeaderBytes bounds an HTTP request head (request line and
	// headers) and a response head.
	MaxHeaderBytes int
	// HeaderTimeout bounds reading one request head (HTTP) or the whole
	// handshake (SOCKS) once it started: slow clients are cut off.
	HeaderTimeout time.Duration
	// IdleTimeout bounds the wait for the next request on a keep-alive
	// HTTP connection.
	IdleTimeout time.Duration
	// ResolveTimeout bounds one name lookup.
	ResolveTimeout time.Duration
	// DialTimeout bounds connecting to one upstream address.
	DialTimeout time.Duration
	// ResponseTimeout bounds waiting for a plain-HTTP response head.
	ResponseTimeout time.Duration
	// Recent is how many decisions Recent keeps.
	Recent int
	// MaxConns bounds the guest connections served at once (both
	// protocols); more are refused (too-many-connections).
	MaxConns int
	// RepeatInterval is how often repeated identical refusals are
	// summarised in the decision log (see Decision.Repeated).
	RepeatInterval time.Duration
}

// Defaults for zero Config fields.
const (
	DefaultAskTimeout      = 30 * time.Second
	DefaultMaxHeaderBytes  = 32 << 10
	DefaultHeaderTimeout   = 10 * time.Second
	DefaultIdleTimeout     = 90 * time.Second
	DefaultResolveTimeout  = 5 * time.Second
	DefaultDialTimeout     = 10 * time.Second
	DefaultResponseTimeout = 60 * time.Second
	DefaultRecent          = 1000
	DefaultMaxConns        = 1024
	DefaultRepeatInterval  = 5 * time.Second
)

func (l Limits) withDefaults() Limits {
	def := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.HeaderTimeout, DefaultHeaderTimeout)
	def(&l.IdleTimeout, DefaultIdleTimeout)
	def(&l.ResolveTimeout, DefaultResolveTimeout)
	def(&l.DialTimeout, DefaultDialTimeout)
	def(&l.ResponseTimeout, DefaultResponseTimeout)
	def(&l.RepeatInterval, DefaultRepeatInterval)
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if l.Recent <= 0 {
		l.Recent = DefaultRecent
	}
	if l.MaxConns <= 0 {
		l.MaxConns = DefaultMaxConns
	}
	return l
}
