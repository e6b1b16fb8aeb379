package egress

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// Protocol is how a connection reached the gate.
type Protocol string

// The protocols.
const (
	// ProtoHTTP is a plain HTTP request with an absolute URI.
	ProtoHTTP Protocol = "http"
	// ProtoConnect is an HTTP CONNECT tunnel.
	ProtoConnect Protocol = "connect"
	// ProtoSOCKS is a SOCKS5 CONNECT.
	ProtoSOCKS Protocol = "socks"
)

// Action is the outcome of an attempt: whether bytes flowed.
type Action string

// The actions.
const (
	// ActionAllow: the connection was made (or the request forwarded).
	ActionAllow Action = "allow"
	// ActionDeny: it was refused, or failed before any byte flowed.
	ActionDeny Action = "deny"
)

// Reason is a stable, machine-readable code for a decision. It appears in
// the log, in the X-Airlock-Decision header and in the UI.
type Reason string

// The reasons. Allowed-* reasons come with ActionAllow, all others with
// ActionDeny.
const (
	// ReasonAllowedByRule: an allow entry or a map-host pin matched.
	ReasonAllowedByRule Reason = "allowed-by-rule"
	// ReasonAllowedByAsk: no rule matched and the Decider allowed it.
	ReasonAllowedByAsk Reason = "allowed-by-ask"
	// ReasonDeniedByRule: a deny entry matched the name, address or port.
	ReasonDeniedByRule Reason = "denied-by-rule"
	// ReasonNoMatchingRule: nothing matched and no Decider is attached.
	ReasonNoMatchingRule Reason = "no-matching-rule"
	// ReasonPrivateAddress: the target is or resolved to a loopback,
	// private, link-local, CGNAT, multicast, unspecified, broadcast or
	// reserved address that no entry allows explicitly.
	ReasonPrivateAddress Reason = "private-address"
	// ReasonMetadataAddress: the target is or resolved to a cloud metadata
	// address that no entry allows exactly.
	ReasonMetadataAddress Reason = "metadata-address"
	// ReasonHostMismatch: the Host header disagrees with the request target.
	ReasonHostMismatch Reason = "host-mismatch"
	// ReasonBadRequest: malformed or unsupported request (origin-form
	// request, https:// absolute URI, bad SOCKS message, invalid host).
	ReasonBadRequest Reason = "bad-request"
	// ReasonHeaderTooLarge: the request head exceeded the size limit.
	ReasonHeaderTooLarge Reason = "header-too-large"
	// ReasonTimeout: the client was too slow to send its request.
	ReasonTimeout Reason = "timeout"
	// ReasonAuthFailed: a missing (when required) or unknown credential.
	ReasonAuthFailed Reason = "auth-failed"
	// ReasonTooManyConns: the guest has Limits.MaxConns connections open.
	ReasonTooManyConns Reason = "too-many-connections"
	// ReasonUnsupported: SOCKS BIND or UDP ASSOCIATE.
	ReasonUnsupported Reason = "unsupported"
	// ReasonResolveFailed: the name did not resolve.
	ReasonResolveFailed Reason = "resolve-failed"
	// ReasonDialFailed: allowed, but no checked address accepted the
	// connection in time.
	ReasonDialFailed Reason = "dial-failed"
	// ReasonAskDenied: the Decider said deny.
	ReasonAskDenied Reason = "ask-denied"
	// ReasonAskTimeout: the Decider did not answer before the deadline.
	ReasonAskTimeout Reason = "ask-timeout"
	// ReasonAskFailed: the Decider returned an error.
	ReasonAskFailed Reason = "ask-failed"
	// ReasonUpstreamError: plain HTTP only; the upstream broke the
	// exchange (bad response, reset) after the connection was allowed.
	ReasonUpstreamError Reason = "upstream-error"
	// ReasonShutdown: the gate closed while deciding.
	ReasonShutdown Reason = "shutdown"
	// ReasonPlaceholder: a request carried the placeholder of a secret to
	// a host the secret is not for (or over plain HTTP); the secret's name
	// is in the detail, never its value.
	ReasonPlaceholder Reason = "placeholder-refused"
	// ReasonUpstreamCert: the gate terminates this host's TLS and the real
	// server's certificate did not verify (or the TLS handshake failed).
	ReasonUpstreamCert Reason = "upstream-tls-failed"
)

// allowed reports whether r lets bytes flow.
func (r Reason) allowed() bool { return r == ReasonAllowedByRule || r == ReasonAllowedByAsk }

// Decision is one line of the decision log: one connection attempt (for
// plain HTTP, one request). It is recorded once, when the connection ends
// or is refused, so it carries the byte counts and duration.
type Decision struct {
	// Seq numbers decisions from 1 in the order they were recorded; a
	// subscriber that sees a gap has missed some and can call Recent.
	Seq uint64 `json:"seq"`
	// Time is when the attempt started.
	Time time.Time `json:"time"`
	// Task identifies the task by its credential; "" when none was given.
	Task string `json:"task,omitempty"`
	// Protocol is http, connect or socks.
	Protocol Protocol `json:"protocol"`
	// Host is the normalised target name or address ("" when the request
	// did not get that far).
	Host string `json:"host,omitempty"`
	// Port is the target port.
	Port uint16 `json:"port,omitempty"`
	// Addr is the address dialled, or the address that was refused.
	Addr string `json:"addr,omitempty"`
	// Action is allow or deny.
	Action Action `json:"decision"`
	// Reason is the machine-readable reason.
	Reason Reason `json:"reason"`
	// Rule is the entry that matched, in canonical form ("map-host
	// NAME=ADDR", "ask:allow-once" …), if any.
	Rule string `json:"rule,omitempty"`
	// Detail is a human-readable explanation for refusals and errors.
	Detail string `json:"detail,omitempty"`
	// Secrets names the secrets the gate added to this connection's
	// requests (names only; values are never logged).
	Secrets []string `json:"secrets,omitempty"`
	// BytesUp counts bytes from the guest to the upstream.
	BytesUp int64 `json:"bytes_up"`
	// BytesDown counts bytes from the upstream to the guest.
	BytesDown int64 `json:"bytes_down"`
	// Duration is from the start of the attempt to its end.
	Duration time.Duration `json:"duration_ns"`
}

// subscriberBuffer is the channel capacity of a subscriber. A subscriber
// that falls further behind misses decisions (visible as Seq gaps); the
// gate never waits for it.
const subscriberBuffer = 256

// journal keeps recent decisions, appends them to a file and fans them out.
type journal struct {
	logger *slog.Logger

	mu      sync.Mutex
	seq     uint64
	ring    []Decision
	next    int // index of the next write in ring
	full    bool
	file    *os.File
	fileErr bool // a write error was already logged
	subs    map[chan Decision]struct{}
	closed  bool
}

// newJournal opens path (if not empty) for appending.
func newJournal(path string, size int, logger *slog.Logger) (*journal, error) {
	j := &journal{logger: logger, ring: make([]Decision, size), subs: map[chan Decision]struct{}{}}
	if path != "" {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			return nil, fmt.Errorf("egress: open decision log: %w", err)
		}
		j.file = f
	}
	return j, nil
}

// record numbers d, keeps it, writes it and sends it to subscribers.
func (j *journal) record(d Decision) Decision {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.seq++
	d.Seq = j.seq
	j.ring[j.next] = d
	j.next = (j.next + 1) % len(j.ring)
	if j.next == 0 {
		j.full = true
	}
	if j.file != nil {
		// One write per line: with O_APPEND, lines from several processes
		// never interleave.
		line, _ := json.Marshal(d)
		if _, err := j.file.Write(append(line, '\n')); err != nil && !j.fileErr {
			j.fileErr = true
			j.logger.Error("egress: write decision log", "err", err)
		}
	}
	for ch := range j.subs {
		select {
		case ch <- d:
		default: // lagging subscriber: it sees a Seq gap
		}
	}
	return d
}

// recent returns the kept decisions, oldest first.
func (j *journal) recent() []Decision {
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.full {
		return append([]Decision(nil), j.ring[:j.next]...)
	}
	out := make([]Decision, 0, len(j.ring))
	out = append(out, j.ring[j.next:]...)
	return append(out, j.ring[:j.next]...)
}

// subscribe returns a channel of decisions closed when ctx ends or the
// journal closes; done is closed when the watcher goroutine exits.
func (j *journal) subscribe(ctx context.Context, gateDone <-chan struct{}, wg *sync.WaitGroup) <-chan Decision {
	ch := make(chan Decision, subscriberBuffer)
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		close(ch)
		return ch
	}
	j.subs[ch] = struct{}{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-ctx.Done():
		case <-gateDone:
		}
		j.unsubscribe(ch)
	}()
	return ch
}

func (j *journal) unsubscribe(ch chan Decision) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if _, ok := j.subs[ch]; ok {
		delete(j.subs, ch)
		close(ch)
	}
}

// close closes the file and every subscriber.
func (j *journal) close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.closed = true
	for ch := range j.subs {
		delete(j.subs, ch)
		close(ch)
	}
	if j.file == nil {
		return nil
	}
	err := j.file.Close()
	j.file = nil
	if err != nil {
		return fmt.Errorf("egress: close decision log: %w", err)
	}
	return nil
}
