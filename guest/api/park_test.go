package api

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestWakeRoundTrip(t *testing.T) {
	w := Wake{Time: time.Date(2026, 12, 3, 15, 4, 5, 123456789, time.UTC)}
	for i := range w.Entropy {
		w.Entropy[i] = byte(i * 7)
	}
	b := w.Marshal()
	if len(b) != WakeSize {
		t.Fatalf("wake is %d bytes, want %d", len(b), WakeSize)
	}
	got, err := ReadWake(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if !got.Time.Equal(w.Time) || got.Entropy != w.Entropy {
		t.Errorf("round trip %+v gave %+v", w, got)
	}
}

func TestReadWakeRefuses(t *testing.T) {
	good := Wake{Time: time.Unix(1, 0)}.Marshal()
	edit := func(f func(b []byte)) []byte {
		b := bytes.Clone(good)
		f(b)
		return b
	}
	for name, tc := range map[string]struct {
		in   []byte
		want string
	}{
		"short":    {good[:WakeSize-1], "read the host's wake"},
		"empty":    {nil, "read the host's wake"},
		"magic":    {edit(func(b []byte) { b[0] = 'X' }), "where its wake record belongs"},
		"parked":   {append(Parked(), make([]byte, WakeSize-ParkedSize)...), "where its wake record belongs"},
		"version":  {edit(func(b []byte) { b[8] = 2 }), "version 2"},
		"reserved": {edit(func(b []byte) { b[10] = 1 }), "reserved"},
		"flags":    {edit(func(b []byte) { b[WakeSize-1] = 1 }), "reserved"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ReadWake(bytes.NewReader(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one saying %q", err, tc.want)
			}
		})
	}
}

func TestReadParked(t *testing.T) {
	if err := ReadParked(bytes.NewReader(Parked())); err != nil {
		t.Fatal(err)
	}
	old := Parked()
	old[8] = 0
	for name, tc := range map[string]struct {
		in   []byte
		want string
	}{
		"short":   {Parked()[:ParkedSize-1], "read the parked guest's record"},
		"hello":   {[]byte("AIRLKMUX\x03\x00\x01\x02\x03\x04\x05\x06"), "where its parked record belongs"},
		"version": {old, "version 0"},
	} {
		t.Run(name, func(t *testing.T) {
			err := ReadParked(bytes.NewReader(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one saying %q", err, tc.want)
			}
		})
	}
}

func TestParkNeedsSerialAndNoRoot(t *testing.T) {
	ok := BootConfig{Transport: TransportSerial, Share: Share9P, Park: true, UID: 1000, GID: 1000}
	got, err := ParseCmdline(strings.Join(ok.Args(), " "))
	if err != nil || got != ok {
		t.Fatalf("round trip %+v gave %+v, %v", ok, got, err)
	}
	for _, c := range []BootConfig{
		{Transport: TransportVsock, Park: true},
		{Transport: TransportSerial, Root: RootLabel, Park: true},
	} {
		if _, err := ParseCmdline(strings.Join(c.Args(), " ")); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

// FuzzReadWake: whatever comes where the Wake belongs is refused or read
// as exactly what Marshal writes, never more than WakeSize bytes read.
func FuzzReadWake(f *testing.F) {
	f.Add(Wake{Time: time.Unix(1700000000, 5)}.Marshal())
	f.Add(Parked())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, in []byte) {
		r := &countingReader{r: bytes.NewReader(in)}
		w, err := ReadWake(r)
		if r.n > WakeSize {
			t.Fatalf("read %d bytes, bound %d", r.n, WakeSize)
		}
		if err != nil {
			return
		}
		if !bytes.Equal(w.Marshal(), in[:WakeSize]) {
			t.Fatalf("accepted %x, which Marshal writes as %x", in[:WakeSize], w.Marshal())
		}
	})
}
