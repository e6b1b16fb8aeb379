package mux

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
)

// The hello the Server sends before anything else: 8 bytes of magic, one
// version byte and one reserved byte (zero).
const (
	helloMagic   = "AIRLKMUX"
	helloVersion = 1
	helloSize    = len(helloMagic) + 2
)

func hello() []byte {
	return append([]byte(helloMagic), helloVersion, 0)
}

// readHello reads and checks the Server's hello.
func readHello(r *bufio.Reader) error {
	var b [helloSize]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		if err == io.EOF {
			return fmt.Errorf("%w: peer hung up before its hello (%w)", ErrClosed, err)
		}
		if err == io.ErrUnexpectedEOF {
			return fmt.Errorf("%w: short hello", ErrProtocol)
		}
		return fmt.Errorf("%w: read hello: %w", ErrClosed, err)
	}
	if !bytes.Equal(b[:len(helloMagic)], []byte(helloMagic)) {
		return fmt.Errorf("%w: bad hello magic %q", ErrProtocol, b[:len(helloMagic)])
	}
	if v := b[len(helloMagic)]; v != helloVersion {
		return fmt.Errorf("%w: peer speaks version %d, this side %d", ErrProtocol, v, helloVersion)
	}
	if b[len(helloMagic)+1] != 0 {
		return fmt.Errorf("%w: reserved hello byte %#x", ErrProtocol, b[len(helloMagic)+1])
	}
	return nil
}

func putPort(port uint32) []byte {
	return binary.BigEndian.AppendUint32(nil, port)
}

func readPort(r io.Reader) (uint32, error) {
	var b [4]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint32(b[:]), nil
}
