package service

import "golang.org/x/sys/unix"

// hostMemoryMiB is the host's physical memory, 0 when unknown.
func hostMemoryMiB() int {
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) != nil {
		return 0
	}
	return int(uint64(si.Totalram) * uint64(si.Unit) >> 20)
}
