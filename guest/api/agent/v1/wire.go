package agentv1

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unicode/utf8"
)

// The protobuf wire format (protobuf.dev/programming-guides/encoding),
// as much of it as agent.proto's proto3 messages use: varints, and
// length-delimited strings, bytes and messages. Unknown fields, groups
// included, are skipped when read.

type wireType byte

const (
	wireVarint wireType = 0
	wireI64    wireType = 1
	wireBytes  wireType = 2
	wireStart  wireType = 3 // group start (unknown fields only)
	wireEnd    wireType = 4 // group end
	wireI32    wireType = 5
)

const (
	maxFieldNumber = 1<<29 - 1
	// groupDepth bounds the nesting of unknown groups (protobuf-go's
	// limit, which this decoder matches: see TestConformance).
	groupDepth = 10000
)

// ErrWire is wrapped by every error of Unmarshal: the bytes are not a
// valid encoding of the message.
var ErrWire = errors.New("agentv1: bad wire encoding")

func wireErr(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrWire}, a...)...)
}

// encoder appends fields to b; the first invalid string (proto3 strings
// are UTF-8) is kept in err.
type encoder struct {
	b   []byte
	err error
}

func (e *encoder) tag(num int, t wireType) {
	e.b = binary.AppendUvarint(e.b, uint64(num)<<3|uint64(t))
}

// uint64 writes a varint field; a zero value is left out (proto3's
// implicit presence) unless always.
func (e *encoder) uint64(num int, v uint64, always bool) {
	if v == 0 && !always {
		return
	}
	e.tag(num, wireVarint)
	e.b = binary.AppendUvarint(e.b, v)
}

// int64 writes int32 and int64 fields: a negative int32 is sign-extended
// to ten bytes, as protobuf does.
func (e *encoder) int64(num int, v int64, always bool) { e.uint64(num, uint64(v), always) }

func (e *encoder) bool(num int, v, always bool) {
	var u uint64
	if v {
		u = 1
	}
	e.uint64(num, u, always)
}

func (e *encoder) bytes(num int, v []byte, always bool) {
	if len(v) == 0 && !always {
		return
	}
	e.tag(num, wireBytes)
	e.b = binary.AppendUvarint(e.b, uint64(len(v)))
	e.b = append(e.b, v...)
}

func (e *encoder) string(num int, v string) {
	if v != "" {
		e.repeatedString(num, v)
	}
}

// repeatedString writes one element of a repeated string field, empty
// or not.
func (e *encoder) repeatedString(num int, v string) {
	if e.err == nil && !utf8.ValidString(v) {
		e.err = fmt.Errorf("agentv1: field %d: string is not valid UTF-8", num)
	}
	e.tag(num, wireBytes)
	e.b = binary.AppendUvarint(e.b, uint64(len(v)))
	e.b = append(e.b, v...)
}

// message writes m (nil: an empty message) as a length-delimited field:
// always, as every message field here is a oneof member.
func (e *encoder) message(num int, m interface{ encode(*encoder) }) {
	e.tag(num, wireBytes)
	at := len(e.b)
	e.b = append(e.b, 0) // the length, if it fits in one byte
	if m != nil {
		m.encode(e)
	}
	n := len(e.b) - at - 1
	if n < 0x80 {
		e.b[at] = byte(n)
		return
	}
	var l [binary.MaxVarintLen64]byte
	k := binary.PutUvarint(l[:], uint64(n))
	e.b = append(e.b, l[:k-1]...)
	copy(e.b[at+k:], e.b[at+1:at+1+n])
	copy(e.b[at:], l[:k])
}

// decoder reads the fields of one message from b.
type decoder struct{ b []byte }

func (d *decoder) more() bool { return len(d.b) > 0 }

func (d *decoder) varint() (uint64, error) {
	var v uint64
	for i := 0; i < binary.MaxVarintLen64; i++ {
		if i >= len(d.b) {
			return 0, wireErr("truncated varint")
		}
		c := d.b[i]
		if i == binary.MaxVarintLen64-1 && c > 1 {
			return 0, wireErr("varint overflows 64 bits")
		}
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			d.b = d.b[i+1:]
			return v, nil
		}
	}
	return 0, wireErr("varint overflows 64 bits")
}

// field reads the next field's number and wire type.
func (d *decoder) field() (int, wireType, error) {
	v, err := d.varint()
	if err != nil {
		return 0, 0, err
	}
	num, t := v>>3, wireType(v&7)
	if num == 0 || num > maxFieldNumber {
		return 0, 0, wireErr("field number %d", num)
	}
	return int(num), t, nil
}

// bytes reads a length-delimited value; it aliases the input.
func (d *decoder) bytes() ([]byte, error) {
	n, err := d.varint()
	if err != nil {
		return nil, err
	}
	if n > uint64(len(d.b)) {
		return nil, wireErr("length %d past the end", n)
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v, nil
}

func (d *decoder) string(num int) (string, error) {
	v, err := d.bytes()
	if err != nil {
		return "", err
	}
	if !utf8.Valid(v) {
		return "", wireErr("field %d: string is not valid UTF-8", num)
	}
	return string(v), nil
}

// skip reads past the value of an unknown field (or a known one of an
// unexpected wire type, which protobuf also treats as unknown).
func (d *decoder) skip(num int, t wireType) error {
	return d.skipDepth(num, t, groupDepth)
}

func (d *decoder) skipDepth(num int, t wireType, depth int) error {
	switch t {
	case wireVarint:
		_, err := d.varint()
		return err
	case wireI64, wireI32:
		n := 8
		if t == wireI32 {
			n = 4
		}
		if len(d.b) < n {
			return wireErr("truncated fixed-size value")
		}
		d.b = d.b[n:]
		return nil
	case wireBytes:
		_, err := d.bytes()
		return err
	case wireStart:
		if depth < 0 {
			return wireErr("groups nested deeper than %d", groupDepth)
		}
		for {
			if !d.more() {
				return wireErr("group %d not ended", num)
			}
			// Inside a group protobuf-go takes any positive int32 as a
			// field number.
			v, err := d.varint()
			if err != nil {
				return err
			}
			n, t := int(v>>3), wireType(v&7)
			if v>>3 == 0 || v>>3 > math.MaxInt32 {
				return wireErr("field number %d", v>>3)
			}
			if t == wireEnd {
				if n != num {
					return wireErr("group %d ended by %d", num, n)
				}
				return nil
			}
			if err := d.skipDepth(n, t, depth-1); err != nil {
				return err
			}
		}
	default: // an end without a start, or types 6 and 7
		return wireErr("field %d: wire type %d", num, t)
	}
}

// fields calls f for each field of b; f reads the value (or skips it).
func fields(b []byte, f func(d *decoder, num int, t wireType) error) error {
	d := decoder{b}
	for d.more() {
		num, t, err := d.field()
		if err != nil {
			return err
		}
		if err := f(&d, num, t); err != nil {
			return err
		}
	}
	return nil
}

// scalar reads a varint field's value, or skips a value of another wire
// type (ok false).
func scalar(d *decoder, num int, t wireType) (v uint64, ok bool, err error) {
	if t != wireVarint {
		return 0, false, d.skip(num, t)
	}
	v, err = d.varint()
	return v, err == nil, err
}

// lengthDelimited reads a length-delimited field's value, or skips a value
// of another wire type (ok false).
func lengthDelimited(d *decoder, num int, t wireType) (v []byte, ok bool, err error) {
	if t != wireBytes {
		return nil, false, d.skip(num, t)
	}
	v, err = d.bytes()
	return v, err == nil, err
}
