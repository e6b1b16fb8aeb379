package api

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	agentv1 "github.com/airlock-sandbox/airlock/guest/api/agent/v1"
)

// Parking. A guest booted with airlock.park=1 (BootConfig.Park) does every
// step of its boot that is the same for every run of its image and
// command line, writes Parked on the serial port its transport uses, and
// waits there for the host's Wake before it mounts the workspace and
// starts its multiplexer. A host may save the machine's state while the
// guest waits (vm/qemu's templates) and start later machines from that
// state; each of them gets its own Wake. So the Wake carries what no two
// machines may share: fresh entropy for the guest kernel's generator,
// which every machine started from one saved state would otherwise
// continue identically, and the wall clock, which the saved state has
// from the day it was saved.
//
// Both are agentv1 messages, each framed on the serial port as an 8-byte
// magic, a one-byte length and the message's protobuf encoding: the
// reader takes exactly the record's bytes (what follows on the port is
// the multiplexer's), and the host reads Parked from a guest it does not
// trust, so the length is bounded by a byte.
const (
	parkedMagic = "AIRLKPRK"
	wakeMagic   = "AIRLKWAK"
	parkHeader  = len(parkedMagic) + 1

	// ParkVersion is the park protocol's version, in both messages: a
	// host and a guest of different versions refuse each other's records.
	ParkVersion = 2

	// WakeEntropySize is how many random bytes a Wake carries: a full
	// reseed of the guest kernel's generator (a 256-bit key).
	WakeEntropySize = 32
)

// Parked and Wake are the messages of parking (agentv1's).
type (
	Parked = agentv1.Parked
	Wake   = agentv1.Wake
)

// ParkedRecord returns the record a parked guest writes.
func ParkedRecord() []byte {
	b, _ := record(parkedMagic, &Parked{Version: ParkVersion})
	return b
}

// WakeRecord returns w, with this side's ParkVersion, as the record the
// host writes. It fails for a Wake whose entropy is not WakeEntropySize
// bytes.
func WakeRecord(w *Wake) ([]byte, error) {
	if len(w.GetEntropy()) != WakeEntropySize {
		return nil, fmt.Errorf("a wake with %d bytes of entropy, not %d", len(w.GetEntropy()), WakeEntropySize)
	}
	m := &Wake{Version: ParkVersion, UnixNanos: w.GetUnixNanos(), Entropy: w.GetEntropy()}
	return record(wakeMagic, m)
}

func record(magic string, m agentv1.Message) ([]byte, error) {
	n := m.SizeVT()
	if n > 255 {
		return nil, fmt.Errorf("a park record of %d bytes, at most 255", n)
	}
	b := make([]byte, parkHeader+n)
	copy(b, magic)
	b[len(magic)] = byte(n)
	if _, err := m.MarshalToSizedBufferVT(b[parkHeader:]); err != nil {
		return nil, err
	}
	return b, nil
}

// errMalformed is wrapped by readRecord's error for a record whose
// message does not decode.
var errMalformed = errors.New("not a message of this protocol")

// readRecord reads one record with the given magic from r into m: exactly
// its bytes, nothing past them. who and what name the sender and the
// record in errors.
func readRecord(r io.Reader, magic, who, what string, m agentv1.Message) error {
	var h [parkHeader]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return fmt.Errorf("read %s's %s record: %w", who, what, err)
	}
	if !bytes.Equal(h[:len(magic)], []byte(magic)) {
		return fmt.Errorf("%s sent %q where its %s record belongs", who, h[:], what)
	}
	body := make([]byte, h[len(magic)])
	if _, err := io.ReadFull(r, body); err != nil {
		return fmt.Errorf("read %s's %s record: %w", who, what, err)
	}
	if err := m.UnmarshalVT(body); err != nil {
		return fmt.Errorf("%s sent a malformed %s record: %w: %w", who, what, errMalformed, err)
	}
	return nil
}

// ReadParked reads the guest's Parked record from r. The guest is not
// trusted: anything else is an error, and the caller bounds the wait.
func ReadParked(r io.Reader) error {
	var p Parked
	if err := readRecord(r, parkedMagic, "the parked guest", "parked", &p); err != nil {
		if errors.Is(err, errMalformed) {
			// The park records of version 1 were fixed binary; a guest
			// that sends one has an image older than this host.
			return fmt.Errorf("%w (an image older than this airlock? rebuild it: make image)", err)
		}
		return err
	}
	if p.GetVersion() != ParkVersion {
		return fmt.Errorf("the parked guest speaks version %d of the park records, this host %d (rebuild the image: make image)", p.GetVersion(), ParkVersion)
	}
	return nil
}

// ReadWake reads one Wake record from r.
func ReadWake(r io.Reader) (*Wake, error) {
	var w Wake
	if err := readRecord(r, wakeMagic, "the host", "wake", &w); err != nil {
		return nil, err
	}
	switch {
	case w.GetVersion() != ParkVersion:
		return nil, fmt.Errorf("the host speaks version %d of the park records, this guest %d", w.GetVersion(), ParkVersion)
	case len(w.GetEntropy()) != WakeEntropySize:
		return nil, fmt.Errorf("the host's wake carries %d bytes of entropy, not %d", len(w.GetEntropy()), WakeEntropySize)
	}
	return &w, nil
}
