// Package boot is the guest's init (PID 1): it mounts the kernel file
// systems, loads the modules the image lists, brings up loopback, mounts
// the workspace as the kernel command line says, runs the agent
// (guest/agent) inside itself, in PID 1, and runs it again if it returns, reaps
// every child (the agent's tasks through agent.Reaper), and powers
// the guest off when asked. A fatal error is printed to the console and
// powers the guest off: init never hangs silently.
//
// Booted to park (airlock.park=1, guest/api park.go), init stops before the
// workspace: the agent's transport parks on the serial port, the host may
// save the machine there and start others from it, and each is woken with
// its own entropy (the kernel's generator is reseeded before anything of
// the run draws from it) and clock; then init mounts the workspace and lets
// the agent go on.
package boot
