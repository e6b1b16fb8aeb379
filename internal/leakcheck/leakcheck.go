// Package leakcheck fails a test whose goroutines outlive it, the check the
// multiplexer's, the guest's egress and the QEMU backend's tests share.
package leakcheck

import (
	"runtime"
	"testing"
	"time"
)

// Goroutines fails tb if, once it and its subtests have ended, more
// goroutines run than when Goroutines was called. Goroutines that are
// still winding down get five seconds; then every stack is printed.
func Goroutines(tb testing.TB) {
	tb.Helper()
	before := runtime.NumGoroutine()
	tb.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > before {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				tb.Errorf("goroutines leaked: %d before, %d after\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}
