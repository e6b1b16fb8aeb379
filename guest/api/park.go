package api

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"time"
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
// Both records are fixed-size binary: init reads the Wake before anything
// else runs, and the host reads Parked from a guest it does not trust.
const (
	parkedMagic = "AIRLKPRK"
	wakeMagic   = "AIRLKWAK"
	parkVersion = 1

	// ParkedSize is the length of the guest's Parked record: magic,
	// version, seven reserved zero bytes.
	ParkedSize = 16
	// WakeEntropySize is how many random bytes a Wake carries: a full
	// reseed of the guest kernel's generator (a 256-bit key).
	WakeEntropySize = 32
	// WakeSize is the length of the host's Wake record: magic, version,
	// three reserved zero bytes, the wall clock in Unix nanoseconds, the
	// entropy, and a 32-bit flags word (no flags yet).
	WakeSize = 8 + 1 + 3 + 8 + WakeEntropySize + 4
)

// Wake is what the host tells a parked guest.
type Wake struct {
	// Time is the host's wall clock when it sent the Wake.
	Time time.Time
	// Entropy is mixed into the guest kernel's generator, which is then
	// reseeded from it, before anything of this run draws from it.
	Entropy [WakeEntropySize]byte
}

// Parked returns the record a parked guest writes.
func Parked() []byte {
	b := make([]byte, ParkedSize)
	copy(b, parkedMagic)
	b[len(parkedMagic)] = parkVersion
	return b
}

// ReadParked reads the guest's Parked record from r. The guest is not
// trusted: anything else is an error, and the caller bounds the wait.
func ReadParked(r io.Reader) error {
	var b [ParkedSize]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return fmt.Errorf("read the parked guest's record: %w", err)
	}
	if want := Parked(); !bytes.Equal(b[:], want) {
		if bytes.Equal(b[:len(parkedMagic)], want[:len(parkedMagic)]) {
			return fmt.Errorf("the parked guest speaks version %d of the park records, this host %d (rebuild the image: make image)", b[len(parkedMagic)], parkVersion)
		}
		return fmt.Errorf("the guest sent %q where its parked record belongs", b[:])
	}
	return nil
}

// Marshal encodes w as the Wake record.
func (w Wake) Marshal() []byte {
	b := make([]byte, WakeSize)
	copy(b, wakeMagic)
	b[len(wakeMagic)] = parkVersion
	binary.BigEndian.PutUint64(b[12:], uint64(w.Time.UnixNano()))
	copy(b[20:], w.Entropy[:])
	return b
}

// ReadWake reads one Wake record from r.
func ReadWake(r io.Reader) (Wake, error) {
	var w Wake
	var b [WakeSize]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return w, fmt.Errorf("read the host's wake record: %w", err)
	}
	switch {
	case !bytes.Equal(b[:len(wakeMagic)], []byte(wakeMagic)):
		return w, fmt.Errorf("the host sent %q where its wake record belongs", b[:len(wakeMagic)])
	case b[len(wakeMagic)] != parkVersion:
		return w, fmt.Errorf("the host speaks version %d of the park records, this guest %d", b[len(wakeMagic)], parkVersion)
	case b[9] != 0 || b[10] != 0 || b[11] != 0 || binary.BigEndian.Uint32(b[WakeSize-4:]) != 0:
		return w, fmt.Errorf("the host's wake record has reserved bits set")
	}
	w.Time = time.Unix(0, int64(binary.BigEndian.Uint64(b[12:])))
	copy(w.Entropy[:], b[20:])
	return w, nil
}
