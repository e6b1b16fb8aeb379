package tasks

import (
	"encoding/binary"
	"hash/crc32"
	"io"
)

// Stream says which of a task's outputs a chunk came from.
type Stream uint8

// The two output streams; the values are the stream byte of a record.
const (
	// Stdout is the task's standard output.
	Stdout Stream = 1
	// Stderr is the task's standard error.
	Stderr Stream = 2
)

// String returns "stdout" or "stderr".
func (s Stream) String() string {
	switch s {
	case Stdout:
		return "stdout"
	case Stderr:
		return "stderr"
	}
	return "invalid"
}

// Chunk is one record of a task's log.
type Chunk struct {
	// Offset is where the record starts in the log; pass End() to resume after it.
	Offset int64
	// Stream is where the bytes were written.
	Stream Stream
	// Data is the output; it may share memory with other chunks of one read.
	Data []byte
}

// End returns the offset just past this chunk's record.
func (c Chunk) End() int64 { return c.Offset + headerLen + int64(len(c.Data)) }

// Record layout (little endian):
//
//	0  magic   0xA7
//	1  stream  1 stdout, 2 stderr
//	2  length  uint16, payload bytes (1 .. MaxPayload)
//	4  crc     uint32 CRC-32C of bytes 0..3 and the payload
//	8  payload
const (
	headerLen = 8
	magic     = 0xA7
	// MaxRecord bounds one record, header included.
	MaxRecord = 64 << 10
	// MaxPayload is the most output bytes one record carries; longer writes
	// are split.
	MaxPayload = MaxRecord - headerLen
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// appendRecords frames p as one or more records of stream s onto dst.
func appendRecords(dst []byte, s Stream, p []byte) []byte {
	for len(p) > 0 {
		n := min(len(p), MaxPayload)
		var h [headerLen]byte
		putHeader(h[:], s, p[:n])
		dst = append(append(dst, h[:]...), p[:n]...)
		p = p[n:]
	}
	return dst
}

// recordVec frames p as records of stream s for a vectored write: each
// record's header goes into hdrs (8 bytes a record; hdrs must hold them
// all) and vec gets header and payload in turn, the payloads p's own
// memory. The bytes vec holds are those appendRecords would write.
func recordVec(vec [][]byte, hdrs []byte, s Stream, p []byte) [][]byte {
	for len(p) > 0 {
		n := min(len(p), MaxPayload)
		h := hdrs[:headerLen:headerLen]
		hdrs = hdrs[headerLen:]
		putHeader(h, s, p[:n])
		vec = append(vec, h, p[:n])
		p = p[n:]
	}
	return vec
}

// putHeader writes the header of a record of stream s carrying payload
// into h.
func putHeader(h []byte, s Stream, payload []byte) {
	h[0], h[1] = magic, byte(s)
	binary.LittleEndian.PutUint16(h[2:4], uint16(len(payload)))
	crc := crc32.Update(crc32.Checksum(h[:4], castagnoli), castagnoli, payload)
	binary.LittleEndian.PutUint32(h[4:8], crc)
}

// writeAll writes all of vec with w (a writev), going on after a short
// write from where it stopped. It shortens vec's elements as it goes.
func writeAll(w func(vec [][]byte) (int, error), vec [][]byte) error {
	for {
		for len(vec) > 0 && len(vec[0]) == 0 {
			vec = vec[1:]
		}
		if len(vec) == 0 {
			return nil
		}
		n, err := w(vec)
		if err != nil {
			return err
		}
		if n <= 0 {
			return io.ErrShortWrite
		}
		for n > 0 && len(vec) > 0 {
			k := min(n, len(vec[0]))
			vec[0] = vec[0][k:]
			n -= k
			if len(vec[0]) == 0 {
				vec = vec[1:]
			}
		}
	}
}

// recordsLen is the framed size of a write of n bytes.
func recordsLen(n int) int {
	return n + headerLen*((n+MaxPayload-1)/MaxPayload)
}

// parseRecord decodes the record at the start of b. ok is false when b does
// not start with an intact record: too short (a torn tail, or a read window
// that ends mid-record: need tells how many bytes it takes), or damaged.
func parseRecord(b []byte) (s Stream, payload []byte, need int, ok bool) {
	if len(b) < headerLen {
		return 0, nil, headerLen, false
	}
	s = Stream(b[1])
	n := int(binary.LittleEndian.Uint16(b[2:4]))
	if b[0] != magic || (s != Stdout && s != Stderr) || n == 0 {
		return 0, nil, 0, false
	}
	if len(b) < headerLen+n {
		return 0, nil, headerLen + n, false
	}
	payload = b[headerLen : headerLen+n]
	crc := crc32.Update(crc32.Checksum(b[:4], castagnoli), castagnoli, payload)
	if crc != binary.LittleEndian.Uint32(b[4:8]) {
		return 0, nil, 0, false
	}
	return s, payload, headerLen + n, true
}
