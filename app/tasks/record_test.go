package tasks

import (
	"bytes"
	"io"
	"syscall"
	"testing"
)

func TestRecordRoundTrip(t *testing.T) {
	for _, n := range []int{1, 100, MaxPayload - 1, MaxPayload, MaxPayload + 1, 3*MaxPayload + 7} {
		p := pattern(n, byte(n))
		b := appendRecords(nil, Stderr, p)
		if len(b) != recordsLen(n) {
			t.Fatalf("%d bytes: framed %d, recordsLen %d", n, len(b), recordsLen(n))
		}
		var got []byte
		for len(b) > 0 {
			s, payload, size, ok := parseRecord(b)
			if !ok || s != Stderr || size > MaxRecord {
				t.Fatalf("%d bytes: record ok=%v stream=%v size=%d", n, ok, s, size)
			}
			got = append(got, payload...)
			b = b[size:]
		}
		if !bytes.Equal(got, p) {
			t.Fatalf("%d bytes: payload differs", n)
		}
	}
}

func TestRecordDamage(t *testing.T) {
	good := appendRecords(nil, Stdout, []byte("hello"))
	cases := []struct {
		name     string
		mutate   func([]byte) []byte
		wantNeed int // > 0: too short, more bytes would help
	}{
		{"empty", func(b []byte) []byte { return b[:0] }, headerLen},
		{"half header", func(b []byte) []byte { return b[:5] }, headerLen},
		{"half payload", func(b []byte) []byte { return b[:headerLen+2] }, headerLen + 5},
		{"bad magic", func(b []byte) []byte { b[0] = 0; return b }, 0},
		{"bad stream", func(b []byte) []byte { b[1] = 9; return b }, 0},
		{"zero length", func(b []byte) []byte { b[2], b[3] = 0, 0; return b }, 0},
		{"flipped payload bit", func(b []byte) []byte { b[headerLen] ^= 1; return b }, 0},
		{"flipped crc bit", func(b []byte) []byte { b[5] ^= 0x80; return b }, 0},
		{"zeros (power loss)", func(b []byte) []byte { return make([]byte, len(b)) }, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.mutate(append([]byte(nil), good...))
			_, _, need, ok := parseRecord(b)
			if ok || need != tc.wantNeed {
				t.Fatalf("ok=%v need=%d, want false %d", ok, need, tc.wantNeed)
			}
		})
	}
}

// pattern returns n bytes that differ per seed and position, so a swapped
// or shifted chunk shows.
func pattern(n int, seed byte) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = seed ^ byte(i) ^ byte(i>>8)*31
	}
	return p
}

// recordVec frames a piece as appendRecords does, without copying it.
func TestRecordVec(t *testing.T) {
	for _, n := range []int{1, 100, MaxPayload, MaxPayload + 1, 3*MaxPayload + 7, piecePayload} {
		p := pattern(n, byte(n))
		var hdrs [piecePayload / MaxPayload * headerLen]byte
		vec := recordVec(nil, hdrs[:], Stderr, p)
		if got, want := bytes.Join(vec, nil), appendRecords(nil, Stderr, p); !bytes.Equal(got, want) {
			t.Fatalf("%d bytes: recordVec differs from appendRecords", n)
		}
		if &vec[1][0] != &p[0] {
			t.Fatalf("%d bytes: the payload was copied", n)
		}
	}
}

// writeAll goes on after short writes and stops at an error or a write of
// nothing.
func TestWriteAll(t *testing.T) {
	vec := [][]byte{[]byte("head"), []byte("payload one"), {}, []byte("x"), []byte("payload two")}
	want := string(bytes.Join(vec, nil))
	var got []byte
	short := func(v [][]byte) (int, error) { // at most 3 bytes a call
		n := 0
		for _, b := range v {
			k := min(len(b), 3-n)
			got = append(got, b[:k]...)
			if n += k; n == 3 {
				break
			}
		}
		return n, nil
	}
	if err := writeAll(short, vec); err != nil || string(got) != want {
		t.Fatalf("writeAll = %v, wrote %q, want %q", err, got, want)
	}
	if err := writeAll(func([][]byte) (int, error) { return 0, nil }, [][]byte{[]byte("a")}); err != io.ErrShortWrite {
		t.Fatalf("a write of nothing: %v, want io.ErrShortWrite", err)
	}
	if err := writeAll(func([][]byte) (int, error) { return -1, syscall.ENOSPC }, [][]byte{[]byte("a")}); err != syscall.ENOSPC {
		t.Fatalf("a failing write: %v", err)
	}
}
