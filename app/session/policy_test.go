package session

import (
	"testing"
	"time"
)

func TestRestartPolicyDelay(t *testing.T) {
	for _, tc := range []struct {
		p    RestartPolicy
		n    int
		want time.Duration
	}{
		{RestartPolicy{}, 1, 500 * time.Millisecond},
		{RestartPolicy{}, 2, time.Second},
		{RestartPolicy{}, 6, 16 * time.Second},
		{RestartPolicy{}, 7, 30 * time.Second},
		{RestartPolicy{}, 1000, 30 * time.Second},
		{RestartPolicy{InitialDelay: time.Second, MaxDelay: 3 * time.Second}, 3, 3 * time.Second},
		{RestartPolicy{InitialDelay: time.Minute, MaxDelay: time.Second}, 2, time.Minute},
	} {
		if got := tc.p.Delay(tc.n); got != tc.want {
			t.Errorf("%+v.Delay(%d) = %s, want %s", tc.p, tc.n, got, tc.want)
		}
	}
}

func TestBackoffCountsQuickFailures(t *testing.T) {
	b := backoff{p: RestartPolicy{StableAfter: time.Minute, MaxFailures: 3}.withDefaults()}
	type step struct {
		uptime time.Duration
		delay  time.Duration
		giveUp bool
	}
	for i, s := range []step{
		{0, 500 * time.Millisecond, false},               // a failed boot
		{10 * time.Second, time.Second, false},           // lost quickly
		{2 * time.Minute, 500 * time.Millisecond, false}, // stable for a while: start over
		{0, time.Second, false},
		{0, 0, true}, // the third quick failure in a row
	} {
		d, g := b.fail(s.uptime)
		if d != s.delay || g != s.giveUp {
			t.Fatalf("step %d: fail(%s) = %s, %v; want %s, %v", i, s.uptime, d, g, s.delay, s.giveUp)
		}
	}
}
