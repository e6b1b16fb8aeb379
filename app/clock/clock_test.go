package clock

import (
	"context"
	"testing"
	"time"
)

func TestCheck(t *testing.T) {
	const iv = 5 * time.Second
	for _, tc := range []struct {
		name       string
		wall, mono time.Duration
		jump       bool
		skew, late time.Duration
	}{
		{name: "steady", wall: iv, mono: iv},
		{name: "NTP slew", wall: iv + 50*time.Millisecond, mono: iv},
		{name: "busy host, late tick", wall: iv + time.Second, mono: iv + time.Second},
		{name: "sleep on macOS or Linux", wall: iv + time.Hour, mono: iv, jump: true, skew: time.Hour},
		{name: "sleep on Windows", wall: iv + time.Hour, mono: iv + time.Hour, jump: true, late: time.Hour},
		{name: "clock set back", wall: iv - 10*time.Minute, mono: iv, jump: true, skew: -10 * time.Minute},
		{name: "clock set forward", wall: iv + 3*time.Second, mono: iv, jump: true, skew: 3 * time.Second},
		{name: "just under the threshold", wall: iv + 1999*time.Millisecond, mono: iv},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &Manual{Wall: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
			w := New(Options{Interval: iv, Threshold: 2 * time.Second, Clock: f}, nil)
			if _, ok := w.Check(); ok {
				t.Fatal("the first check reported a jump")
			}
			f.Advance(tc.wall, tc.mono)
			j, ok := w.Check()
			if ok != tc.jump {
				t.Fatalf("jump %t (%+v), want %t", ok, j, tc.jump)
			}
			if !ok {
				return
			}
			if j.Skew != tc.skew || j.Late != tc.late {
				t.Errorf("jump %+v, want skew %s late %s", j, tc.skew, tc.late)
			}
			if wall, _ := f.Now(); !j.Wall.Equal(wall) {
				t.Errorf("jump at %s, want %s", j.Wall, wall)
			}
			// Reported once: the next steady tick is quiet.
			f.Advance(iv, iv)
			if j, ok := w.Check(); ok {
				t.Errorf("jump reported again: %+v", j)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	w := New(Options{}, nil)
	if w.o.Interval != DefaultInterval || w.o.Threshold != DefaultThreshold || w.o.Clock == nil {
		t.Errorf("defaults not applied: %+v", w.o)
	}
}

func TestRun(t *testing.T) {
	f := &Manual{Wall: time.Unix(1_700_000_000, 0)}
	jumps := make(chan Jump, 10)
	w := New(Options{Interval: time.Millisecond, Threshold: time.Second, Clock: f}, func(_ context.Context, j Jump) { jumps <- j })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()

	// A wake: the wall clock moves an hour, the monotonic one does not.
	time.Sleep(5 * time.Millisecond)
	f.Advance(time.Hour, 0)
	select {
	case j := <-jumps:
		if j.Skew < time.Hour-time.Second || j.Skew > time.Hour {
			t.Errorf("skew %s, want about an hour", j.Skew)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no jump reported")
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if len(jumps) != 0 {
		t.Errorf("%d more jumps reported", len(jumps))
	}
}

func TestSystemClock(t *testing.T) {
	s := NewSystem()
	w1, m1 := s.Now()
	time.Sleep(20 * time.Millisecond)
	w2, m2 := s.Now()
	if m2-m1 < 20*time.Millisecond {
		t.Errorf("monotonic moved %s over a 20ms sleep", m2-m1)
	}
	if d := w2.Sub(w1) - (m2 - m1); d > time.Second || d < -time.Second {
		t.Errorf("wall and monotonic disagree by %s on a quiet host", d)
	}
	// Check on the system clock stays quiet.
	w := New(Options{Interval: 10 * time.Millisecond}, nil)
	w.Check()
	time.Sleep(10 * time.Millisecond)
	if j, ok := w.Check(); ok {
		t.Errorf("system clock: jump %+v", j)
	}
}
