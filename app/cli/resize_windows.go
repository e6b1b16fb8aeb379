package cli

import "os"

// notifyResize does nothing on Windows, which has no SIGWINCH: the size
// given at start stays (console resize events arrive with the desktop app).
func notifyResize(chan<- os.Signal) {}
