//go:build !windows

package cli

import (
	"os"
	"os/signal"
	"syscall"
)

// notifyResize delivers terminal window size changes on ch.
func notifyResize(ch chan<- os.Signal) { signal.Notify(ch, syscall.SIGWINCH) }
