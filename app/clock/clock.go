// Package clock notices when the host's wall clock jumps: after the
// computer sleeps and wakes (the guest was paused with it and its clock is
// now behind), or when the wall clock is set. The caller answers by setting
// the guest's clock through the agent. It is plain Go, the same on every
// platform.
//
// A Watcher compares, between two ticks, how far the wall clock moved with
// how far the monotonic clock moved. On macOS and Linux the monotonic
// clock stops while the computer sleeps and the wall clock does not, so a
// wake shows as a skew. On Windows Go's monotonic clock keeps counting
// through sleep, so a wake shows instead as a tick that came far too late;
// the Watcher reports both.
package clock

import (
	"context"
	"sync"
	"time"
)

// Clock reads the wall clock and a monotonic clock. The system clock is
// the default; tests pass their own.
type Clock interface {
	// Now returns the wall-clock time, and a monotonic reading from any
	// fixed origin.
	Now() (wall time.Time, mono time.Duration)
}

// System is the host's clock.
type System struct{ origin time.Time }

// NewSystem returns the host's clock.
func NewSystem() *System { return &System{origin: time.Now()} }

// Now implements Clock. Round(0) strips the monotonic reading, so the wall
// time is only wall; Sub on two readings of time.Now uses the monotonic one.
func (s *System) Now() (time.Time, time.Duration) {
	t := time.Now()
	return t.Round(0), t.Sub(s.origin)
}

// Defaults for Options fields left zero.
const (
	DefaultInterval  = 5 * time.Second
	DefaultThreshold = 2 * time.Second
)

// Options configure a Watcher.
type Options struct {
	// Interval is how often the clocks are compared.
	Interval time.Duration
	// Threshold is the smallest skew (or lateness of a tick) reported; it
	// stays above what NTP slewing and a busy host produce in one Interval.
	Threshold time.Duration
	// Clock is the clock read; nil means NewSystem().
	Clock Clock
}

// Jump describes one detected jump.
type Jump struct {
	// Wall is the wall-clock time when it was noticed.
	Wall time.Time
	// Skew is how much further the wall clock moved than the monotonic
	// one since the last check: about the sleep time on macOS and Linux,
	// negative when the clock was set back.
	Skew time.Duration
	// Late is how much later than Interval the check ran, by the monotonic
	// clock: about the sleep time on Windows, or a process that was frozen.
	Late time.Duration
}

// Watcher compares the clocks on every tick. Check and Run are not for
// concurrent use.
type Watcher struct {
	o      Options
	onJump func(context.Context, Jump)

	primed   bool
	lastWall time.Time
	lastMono time.Duration
}

// New returns a watcher that calls onJump, from Run's goroutine, for every
// jump. onJump should set the guest's clock (agent SetTime with the host's
// time.Now()), bounded by the ctx it is given.
func New(o Options, onJump func(context.Context, Jump)) *Watcher {
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Threshold <= 0 {
		o.Threshold = DefaultThreshold
	}
	if o.Clock == nil {
		o.Clock = NewSystem()
	}
	return &Watcher{o: o, onJump: onJump}
}

// Check reads the clocks and reports a jump since the previous Check. The
// first Check only takes the reading.
func (w *Watcher) Check() (Jump, bool) {
	wall, mono := w.o.Clock.Now()
	defer func() { w.lastWall, w.lastMono, w.primed = wall, mono, true }()
	if !w.primed {
		return Jump{}, false
	}
	dMono := mono - w.lastMono
	j := Jump{Wall: wall, Skew: wall.Sub(w.lastWall) - dMono, Late: dMono - w.o.Interval}
	if abs(j.Skew) >= w.o.Threshold || j.Late >= w.o.Threshold {
		return j, true
	}
	return Jump{}, false
}

// Run checks the clocks every Interval until ctx is done, calling onJump
// for each jump.
func (w *Watcher) Run(ctx context.Context) {
	t := time.NewTicker(w.o.Interval)
	defer t.Stop()
	w.Check()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if j, ok := w.Check(); ok && w.onJump != nil {
				w.onJump(ctx, j)
			}
		}
	}
}

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// Manual is a Clock moved by hand, for tests of code that watches the clock.
type Manual struct {
	mu sync.Mutex
	// Wall is the wall clock's reading; set it before first use.
	Wall time.Time
	mono time.Duration
}

// Now implements Clock.
func (m *Manual) Now() (time.Time, time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.Wall, m.mono
}

// Advance moves the wall clock by wall and the monotonic clock by mono.
func (m *Manual) Advance(wall, mono time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.Wall = m.Wall.Add(wall)
	m.mono += mono
}
