package mux

// The product's receive windows, in one place for both ends and the
// benchmarks (guest/mux, tests/bench), so that these measure what ships.
// A task's output comes on a stream the host opens: 1 MiB ahead lets the
// guest send for longer between the host's credit returns (per MiB of
// output, half the guest's context switches, and 35-60 % more stdout than
// with the 256 KiB minimum). A stream the guest opens (egress) keeps the
// minimum on the host: the guest opens up to MaxStreams of those, and each
// may hold its window there.
const (
	productWindow            = 1 << 20
	productGuestOpenedWindow = minWindow
)

// HostConfig is the host's side of the product's session (vm/qemu).
func HostConfig() Config {
	return Config{Window: productWindow, PeerWindow: productGuestOpenedWindow}
}

// GuestConfig is the guest's side of the product's session
// (guest/transport, which adds Splice where its port is a file).
func GuestConfig() Config {
	return Config{Window: productWindow}
}
