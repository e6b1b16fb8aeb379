package mux

import (
	"syscall"
	"time"
)

// procUsage returns the process's CPU time (user and system) and context
// switches (voluntary and not) so far.
func procUsage() (cpu time.Duration, switches int64, ok bool) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0, 0, false
	}
	cpu = time.Duration(syscall.TimevalToNsec(ru.Utime) + syscall.TimevalToNsec(ru.Stime))
	return cpu, int64(ru.Nvcsw + ru.Nivcsw), true
}
