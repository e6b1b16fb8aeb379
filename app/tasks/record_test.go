package tasks

import (
	"bytes"
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
