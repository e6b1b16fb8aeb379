package console

import (
	"time"

	"golang.org/x/sys/unix"
)

// Uptime is the time since the guest booted (CLOCK_BOOTTIME, the clock of
// the agent's readiness report).
func Uptime() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
