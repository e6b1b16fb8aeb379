package service

import "golang.org/x/sys/unix"

// hostMemoryMiB is the host's physical memory, 0 when unknown.
func hostMemoryMiB() int {
	n, err := unix.SysctlUint64("hw.memsize")
	if err != nil {
		return 0
	}
	return int(n >> 20)
}
