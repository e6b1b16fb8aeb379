//go:build !linux

package egress

import "syscall"

// freeBind does nothing off Linux, where the guest never runs (the package
// builds everywhere for its tests).
func freeBind(string, string, syscall.RawConn) error { return nil }
