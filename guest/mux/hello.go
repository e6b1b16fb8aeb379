package mux

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
)

// The hello the Server sends before anything else: 8 bytes of magic, one
// version byte, one reserved byte (zero) and an 8-byte nonce the Server
// draws afresh each time it starts. The Client answers with the ack: 8
// bytes of its own magic and the same nonce; the Server starts its session only
// after it, and discards whatever comes before it.
//
// Why the ack: on virtio-serial a guest process that dies does not close
// anything the host can see, and QEMU stops reading the host's socket while
// the guest has the port closed, so what the host sent to the dead process
// reaches its successor first. The nonce lets the successor find where the
// host's new session starts. The Client, for its part, accepts a new hello
// in place of a frame header (see recvLoop in frame.go) as the peer having restarted.
const (
	helloMagic   = "AIRLKMUX"
	ackMagic     = "AIRLKACK"
	helloVersion = 3
	nonceSize    = 8
	helloSize    = len(helloMagic) + 2 + nonceSize
	ackSize      = len(ackMagic) + nonceSize
	// maxStale bounds what the Server discards while it looks for the ack:
	// more than the host's socket buffer and QEMU hold, far less than a
	// dead session could have meant to send.
	maxStale = 64 << 20
)

type nonce [nonceSize]byte

// nonceFor draws the nonce of a Server's hello (fixed by the fuzz tests).
var nonceFor = newNonce

// newNonce draws from the runtime's generator, which the kernel seeds at
// exec and which never waits. The nonce only tells one guest process's
// session from its predecessor's; it is no secret (the guest is not
// trusted with anything it protects). crypto/rand waits for the kernel's
// entropy pool, which early in a boot without an entropy device holds the
// hello back for about a second (the benchmarks' trivial init; Hyper-V
// offers no virtio-rng).
func newNonce() nonce {
	var n nonce
	binary.LittleEndian.PutUint64(n[:], rand.Uint64())
	return n
}

func hello(n nonce) []byte {
	return append(append([]byte(helloMagic), helloVersion, 0), n[:]...)
}

func ack(n nonce) []byte {
	return append([]byte(ackMagic), n[:]...)
}

// readHello reads and checks the Server's hello and returns its nonce.
func readHello(r io.Reader) (nonce, error) {
	var b [helloSize]byte
	var n nonce
	if _, err := io.ReadFull(r, b[:]); err != nil {
		if err == io.EOF {
			return n, fmt.Errorf("%w: peer hung up before its hello (%w)", ErrClosed, err)
		}
		if err == io.ErrUnexpectedEOF {
			return n, fmt.Errorf("%w: short hello", ErrProtocol)
		}
		return n, fmt.Errorf("%w: read hello: %w", ErrClosed, err)
	}
	if !bytes.Equal(b[:len(helloMagic)], []byte(helloMagic)) {
		return n, fmt.Errorf("%w: bad hello magic %q", ErrProtocol, b[:len(helloMagic)])
	}
	if v := b[len(helloMagic)]; v != helloVersion {
		return n, fmt.Errorf("%w: peer speaks version %d, this side %d", ErrProtocol, v, helloVersion)
	}
	if b[len(helloMagic)+1] != 0 {
		return n, fmt.Errorf("%w: reserved hello byte %#x", ErrProtocol, b[len(helloMagic)+1])
	}
	copy(n[:], b[len(helloMagic)+2:])
	return n, nil
}

// awaitAck discards what the Client sends until the ack for n, at most
// maxStale bytes.
func awaitAck(r io.ByteReader, n nonce) error {
	want := ack(n)
	var win [ackSize]byte
	for seen := 0; seen < maxStale+ackSize; seen++ {
		c, err := r.ReadByte()
		if err != nil {
			return fmt.Errorf("%w: waiting for the host's ack: %w", ErrClosed, err)
		}
		copy(win[:], win[1:])
		win[ackSize-1] = c
		if seen >= ackSize-1 && bytes.Equal(win[:], want) {
			return nil
		}
	}
	return fmt.Errorf("%w: no ack from the host in %d bytes", ErrProtocol, maxStale)
}
