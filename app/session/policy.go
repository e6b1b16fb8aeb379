package session

import (
	"time"
)

// RestartPolicy bounds how a session brings a machine back after a failed
// boot or a lost VM. Zero fields take the defaults shown.
type RestartPolicy struct {
	// InitialDelay is the wait before the first retry (500 ms); it doubles
	// with every further quick failure in a row.
	InitialDelay time.Duration
	// MaxDelay caps the wait between retries (30 s).
	MaxDelay time.Duration
	// StableAfter is how long a VM must stay up for its loss not to count
	// as a quick failure (1 min): the back-off starts over from there.
	StableAfter time.Duration
	// MaxFailures is the number of quick failures in a row (failed boots,
	// or VMs lost before StableAfter) after which the session gives up and
	// reports StateFailed (5).
	MaxFailures int
}

// Default restart policy values.
const (
	DefaultInitialDelay = 500 * time.Millisecond
	DefaultMaxDelay     = 30 * time.Second
	DefaultStableAfter  = time.Minute
	DefaultMaxFailures  = 5
)

func (p RestartPolicy) withDefaults() RestartPolicy {
	if p.InitialDelay <= 0 {
		p.InitialDelay = DefaultInitialDelay
	}
	if p.MaxDelay <= 0 {
		p.MaxDelay = DefaultMaxDelay
	}
	if p.MaxDelay < p.InitialDelay {
		p.MaxDelay = p.InitialDelay
	}
	if p.StableAfter <= 0 {
		p.StableAfter = DefaultStableAfter
	}
	if p.MaxFailures <= 0 {
		p.MaxFailures = DefaultMaxFailures
	}
	return p
}

// Delay is the wait before the retry that follows the n-th quick failure in
// a row (n ≥ 1): InitialDelay doubled n-1 times, at most MaxDelay.
func (p RestartPolicy) Delay(n int) time.Duration {
	p = p.withDefaults()
	d := p.InitialDelay
	for i := 1; i < n && d < p.MaxDelay; i++ {
		d *= 2
	}
	return min(d, p.MaxDelay)
}

// backoff counts quick failures in a row under a policy.
type backoff struct {
	p        RestartPolicy
	failures int
}

// fail records a failure of a VM that had been up for uptime (0 for a boot
// that failed) and returns the wait before the next try, or giveUp.
func (b *backoff) fail(uptime time.Duration) (delay time.Duration, giveUp bool) {
	if uptime >= b.p.StableAfter {
		b.failures = 0
	}
	b.failures++
	if b.failures >= b.p.MaxFailures {
		return 0, true
	}
	return b.p.Delay(b.failures), false
}

func (b *backoff) reset() { b.failures = 0 }

// HealthPolicy says how often the agent of a running VM is asked whether it
// is alive (a cheap Info call). Zero fields take the defaults shown.
type HealthPolicy struct {
	// Interval between checks (5 s); negative turns the checks off, which
	// leaves only the machine's exit to detect a loss.
	Interval time.Duration
	// Timeout for one check (3 s).
	Timeout time.Duration
	// Misses is how many failed checks in a row mean the agent is dead (3).
	Misses int
	// Reconnects is how many times the host may reach a restarted agent
	// again on the same VM within ReconnectWindow (3); one more and the
	// VM is replaced. Negative: every agent restart replaces the VM.
	Reconnects int
	// ReconnectWindow is the period Reconnects counts over (10 min).
	ReconnectWindow time.Duration
}

// Default health policy values.
const (
	DefaultHealthInterval  = 5 * time.Second
	DefaultHealthTimeout   = 3 * time.Second
	DefaultHealthMisses    = 3
	DefaultReconnects      = 3
	DefaultReconnectWindow = 10 * time.Minute
)

func (h HealthPolicy) withDefaults() HealthPolicy {
	if h.Interval == 0 {
		h.Interval = DefaultHealthInterval
	}
	if h.Timeout <= 0 {
		h.Timeout = DefaultHealthTimeout
	}
	if h.Misses <= 0 {
		h.Misses = DefaultHealthMisses
	}
	if h.Reconnects == 0 {
		h.Reconnects = DefaultReconnects
	}
	if h.ReconnectWindow <= 0 {
		h.ReconnectWindow = DefaultReconnectWindow
	}
	return h
}

// Clock is the session's source of time; tests inject their own.
type Clock interface {
	Now() time.Time
	// After delivers the time once d has passed.
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
