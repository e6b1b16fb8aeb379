package egress

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
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
	// ReasonNoMatchingRule: nothing matched and no Decider is attached, or
	// the Decider had no one to ask (ErrNobodyToAsk).
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
	// Seq numbers decisions from 1 in the order they were recorded, going
	// on after the last one in the log file when a gate opens an existing
	// log; a subscriber that sees a gap has missed some and can call Recent.
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
	// Repeated, when not zero, makes this Decision a summary: it stands
	// for that many refusals identical to the one recorded before it
	// (same task, protocol, host, port, reason and detail), counted since
	// the previous line of that kind instead of recorded one by one. Time
	// is the first of them and Duration runs to the end of the last.
	Repeated int `json:"repeated,omitempty"`
}

// subscriberBuffer is the channel capacity of a subscriber. A subscriber
// that falls further behind misses decisions (visible as Seq gaps); the
// gate never waits for it.
const subscriberBuffer = 256

// maxRepeatKinds bounds the kinds of refusal the journal counts at once;
// refusals of further kinds are recorded one by one (the file's size bound
// still holds).
const maxRepeatKinds = 4096

// repeatKind identifies refusals that are counted together.
type repeatKind struct {
	task   string
	proto  Protocol
	host   string
	port   uint16
	reason Reason
	detail string
}

// repeatBurst is how many identical refusals are recorded one by one
// before the rest are counted: a person retrying sees each attempt, a loop
// costs a few lines and then a count.
const repeatBurst = 5

// repeat is a refusal kind recorded in this interval or the last one.
type repeat struct {
	recorded int      // refusals of this kind recorded one by one
	first    Decision // the first refusal counted since the last line
	last     Decision // the latest refusal counted
	count    int      // refusals counted since the last line
}

// journal keeps recent decisions, appends them to a file and fans them out.
//
// Refusals that repeat one already recorded (same task, protocol, host,
// port, reason and detail: a guest looping on a kept-alive connection, or
// reconnecting as fast as it can) are recorded one by one up to
// repeatBurst, then counted: once per RepeatInterval, and at close, one
// summary Decision with Repeated set to the count is recorded in their
// place. A flood of one refusal costs a few lines and then one line per
// interval, rather than tens of thousands a second. A kind not refused
// again for an interval is forgotten.
type journal struct {
	logger   *slog.Logger
	interval time.Duration

	mu      sync.Mutex
	seq     uint64
	ring    []Decision
	next    int // index of the next write in ring
	full    bool
	file    *logFile
	subs    map[chan Decision]struct{}
	closed  bool
	repeats map[repeatKind]*repeat
	tick    *time.Timer // flushes repeats; nil when none are kept
}

// newJournal opens path (if not empty) for appending, rotating it past
// maxBytes, and keeps the last size decisions already in it as recent.
func newJournal(path string, maxBytes int64, size int, interval time.Duration, logger *slog.Logger) (*journal, error) {
	if interval <= 0 {
		interval = DefaultRepeatInterval
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	j := &journal{logger: logger, interval: interval, ring: make([]Decision, size),
		subs: map[chan Decision]struct{}{}, repeats: map[repeatKind]*repeat{}}
	if path != "" {
		// The log is the history: what it holds is recent again, and
		// numbering goes on after it, across restarts.
		old, err := loadTail(path, size)
		if err != nil {
			return nil, fmt.Errorf("egress: read decision log: %w", err)
		}
		for _, d := range old {
			j.seq = max(j.seq, d.Seq)
			j.ring[j.next] = d
			j.next = (j.next + 1) % len(j.ring)
			if j.next == 0 {
				j.full = true
			}
		}
		f, err := openLogFile(path, maxBytes, logger)
		if err != nil {
			return nil, err
		}
		j.file = f
	}
	return j, nil
}

// record numbers d, keeps it, writes it and sends it to subscribers, unless
// it repeats a refusal of this interval: then it is only counted, and the
// returned Decision has Seq 0.
func (j *journal) record(d Decision) Decision {
	j.mu.Lock()
	defer j.mu.Unlock()
	if d.Action == ActionDeny && !j.closed {
		k := repeatKind{d.Task, d.Protocol, d.Host, d.Port, d.Reason, d.Detail}
		r, ok := j.repeats[k]
		if !ok && len(j.repeats) < maxRepeatKinds {
			r = &repeat{}
			j.repeats[k] = r
			if j.tick == nil {
				j.tick = time.AfterFunc(j.interval, j.flushRepeats)
			}
		}
		if r != nil && r.recorded >= repeatBurst {
			if r.count == 0 {
				r.first = d
			}
			r.last = d
			r.count++
			return d
		}
		if r != nil {
			r.recorded++
		}
	}
	return j.emitLocked(d)
}

// flushRepeats records a summary for each refusal kind counted in the last
// interval and forgets the kinds that were not repeated, so the next one of
// those is recorded in full again.
func (j *journal) flushRepeats() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return
	}
	j.flushLocked(false)
	if len(j.repeats) > 0 {
		j.tick.Reset(j.interval)
	} else {
		j.tick = nil
	}
}

// flushLocked records the pending summaries, oldest first; all also forgets
// every kind.
func (j *journal) flushLocked(all bool) {
	var pending []*repeat
	for k, r := range j.repeats {
		if r.count > 0 {
			pending = append(pending, r)
		}
		if r.count == 0 || all {
			delete(j.repeats, k)
		}
	}
	slices.SortFunc(pending, func(a, b *repeat) int { return a.first.Time.Compare(b.first.Time) })
	for _, r := range pending {
		j.emitLocked(summary(r))
		r.count = 0
	}
}

// summary is the Decision recorded for r's counted refusals: the latest
// one, from the time of the first, with the count.
func summary(r *repeat) Decision {
	d := r.last
	d.Time = r.first.Time
	d.Duration = r.last.Time.Add(r.last.Duration).Sub(r.first.Time)
	d.Repeated = r.count
	d.BytesUp, d.BytesDown = 0, 0
	return d
}

func (j *journal) emitLocked(d Decision) Decision {
	j.seq++
	d.Seq = j.seq
	j.ring[j.next] = d
	j.next = (j.next + 1) % len(j.ring)
	if j.next == 0 {
		j.full = true
	}
	if j.file != nil {
		line, _ := json.Marshal(d)
		j.file.write(append(line, '\n'))
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
	if j.closed {
		return nil
	}
	if j.tick != nil {
		j.tick.Stop()
		j.tick = nil
	}
	j.flushLocked(true)
	j.closed = true
	for ch := range j.subs {
		delete(j.subs, ch)
		close(ch)
	}
	if j.file == nil {
		return nil
	}
	err := j.file.close()
	j.file = nil
	return err
}
