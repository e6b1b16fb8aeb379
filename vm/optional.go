package vm

// Optional capabilities. A Machine offers what every backend can do; what
// only some can is a small interface of its own, which a caller finds by
// a type assertion and a backend declares with a compile-time assertion
// (var _ vm.Restorer = (*Machine)(nil)).

// Restorer is a Machine that may start from a saved state of an earlier
// boot of the same image and shape instead of booting (vm/qemu's
// templates).
type Restorer interface {
	Machine
	// Restored reports whether Start restored a saved state rather than
	// booting.
	Restored() bool
	// RestoreFailed reports whether the machine ended because the saved
	// state it started from failed where a boot might not (its guest did
	// not answer once woken). The backend has discarded that state, so a
	// new machine of the same Config boots.
	RestoreFailed() bool
}

// Restored reports whether m started from a saved state (Restorer); a
// machine that cannot restore one never did.
func Restored(m Machine) bool {
	r, ok := m.(Restorer)
	return ok && r.Restored()
}

// HostGuest is a Machine whose guest is not a system of its own but code
// running in this process on this host: vm/vmtest's fake, whose guest a
// test plays. Whatever changes such a guest's system (its trust store)
// changes the host's, and it has no kernel or agent code to warm up, so
// the host leaves its system alone.
type HostGuest interface {
	Machine
	// GuestIsHost reports whether the guest's system is this host's.
	GuestIsHost() bool
}

// GuestIsHost reports whether m's guest is this host's own system
// (HostGuest).
func GuestIsHost(m Machine) bool {
	h, ok := m.(HostGuest)
	return ok && h.GuestIsHost()
}
