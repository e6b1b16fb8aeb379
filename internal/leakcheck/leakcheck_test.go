package leakcheck

import (
	"strings"
	"testing"
)

// recorder is a testing.TB that keeps what Goroutines reports.
type recorder struct {
	testing.TB
	errs     []string
	cleanups []func()
}

func (r *recorder) Helper()                        {}
func (r *recorder) Cleanup(f func())               { r.cleanups = append(r.cleanups, f) }
func (r *recorder) Errorf(format string, a ...any) { r.errs = append(r.errs, format) }

func TestGoroutines(t *testing.T) {
	r := &recorder{TB: t}
	Goroutines(r)
	stop := make(chan struct{})
	go func() { <-stop }()
	for _, f := range r.cleanups {
		f()
	}
	if len(r.errs) != 1 || !strings.Contains(r.errs[0], "leaked") {
		t.Fatalf("a goroutine left running was not reported: %q", r.errs)
	}
	close(stop)

	r = &recorder{TB: t}
	Goroutines(r)
	done := make(chan struct{})
	go func() { close(done) }()
	<-done
	for _, f := range r.cleanups {
		f()
	}
	if len(r.errs) != 0 {
		t.Fatalf("a goroutine that ended was reported: %q", r.errs)
	}
}
