package mux

import (
	"bytes"
	"encoding/binary"
	"net"
	"testing"
)

// recorder keeps every Write separately.
type recorder struct{ writes [][]byte }

func (r *recorder) Write(p []byte) (int, error) {
	r.writes = append(r.writes, bytes.Clone(p))
	return len(p), nil
}

func header(typ byte, flags uint16, id, length uint32) []byte {
	h := make([]byte, frameHeaderSize)
	h[1] = typ
	binary.BigEndian.PutUint16(h[2:], flags)
	binary.BigEndian.PutUint32(h[4:], id)
	binary.BigEndian.PutUint32(h[8:], length)
	return h
}

func TestFrameWriterJoinsHeaderAndBody(t *testing.T) {
	small := bytes.Repeat([]byte("s"), 100)
	big := bytes.Repeat([]byte("b"), firstWrite+5000)
	update := header(typeWindowUpdate, 0, 1, 1<<20)
	fin := header(typeData, 4, 1, 0)
	tests := []struct {
		name   string
		writes [][]byte // as yamux's send loop makes them
		want   [][]byte // as the port sees them
	}{
		{"small frame, one write", [][]byte{header(typeData, 0, 1, 100), small},
			[][]byte{append(header(typeData, 0, 1, 100), small...)}},
		{"big frame: header with the first 32 KiB, then the rest", [][]byte{header(typeData, 0, 1, uint32(len(big))), big},
			[][]byte{append(header(typeData, 0, 1, uint32(len(big))), big[:firstWrite-frameHeaderSize]...), big[firstWrite-frameHeaderSize:]}},
		{"window update and empty FIN pass through", [][]byte{update, fin}, [][]byte{update, fin}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r recorder
			fw := newFrameWriter(&r)
			for _, w := range tt.writes {
				if n, err := fw.Write(w); n != len(w) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			if len(r.writes) != len(tt.want) {
				t.Fatalf("%d writes, want %d", len(r.writes), len(tt.want))
			}
			for i := range tt.want {
				if !bytes.Equal(r.writes[i], tt.want[i]) {
					t.Errorf("write %d: %d bytes, want %d", i, len(r.writes[i]), len(tt.want[i]))
				}
			}
		})
	}
}

// On a socket the frame leaves through one writev: the reader sees the
// bytes in order.
func TestFrameWriterSocket(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	fw := newFrameWriter(a)
	if fw.vector == nil {
		t.Fatal("a net.Conn should take the writev path")
	}
	body := bytes.Repeat([]byte("x"), 1000)
	hdr := header(typeData, 0, 1, uint32(len(body)))
	got := make(chan []byte, 1)
	go func() {
		buf := make([]byte, len(hdr)+len(body))
		n := 0
		for n < len(buf) {
			m, err := b.Read(buf[n:])
			if err != nil {
				break
			}
			n += m
		}
		got <- buf[:n]
	}()
	fw.Write(hdr)
	fw.Write(body)
	if g := <-got; !bytes.Equal(g, append(hdr, body...)) {
		t.Fatalf("read %d bytes, not the frame", len(g))
	}
}
