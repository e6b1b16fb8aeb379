package api

import (
	"bytes"
	"strings"
	"testing"

	agentv1 "github.com/airlock-sandbox/airlock/guest/api/agent/v1"
)

func testWake() *Wake {
	w := &Wake{UnixNanos: 1796310245123456789, Entropy: make([]byte, WakeEntropySize)}
	for i := range w.Entropy {
		w.Entropy[i] = byte(i * 7)
	}
	return w
}

func TestWakeRoundTrip(t *testing.T) {
	w := testWake()
	b, err := WakeRecord(w)
	if err != nil {
		t.Fatal(err)
	}
	r := bytes.NewReader(append(b, "AIRLKMUX"...))
	got, err := ReadWake(r)
	if err != nil {
		t.Fatal(err)
	}
	if got.UnixNanos != w.UnixNanos || !bytes.Equal(got.Entropy, w.Entropy) || got.Version != ParkVersion {
		t.Errorf("round trip %+v gave %+v", w, got)
	}
	if r.Len() != len("AIRLKMUX") {
		t.Errorf("ReadWake read %d bytes past its record", len("AIRLKMUX")-r.Len())
	}
	if _, err := WakeRecord(&Wake{Entropy: make([]byte, 5)}); err == nil {
		t.Error("WakeRecord took a wake with 5 bytes of entropy")
	}
}

// rawRecord frames m as a park record, whatever its fields.
func rawRecord(t *testing.T, magic string, m agentv1.Message) []byte {
	t.Helper()
	b, err := record(magic, m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestReadWakeRefuses(t *testing.T) {
	good, err := WakeRecord(testWake())
	if err != nil {
		t.Fatal(err)
	}
	edit := func(f func(b []byte)) []byte {
		b := bytes.Clone(good)
		f(b)
		return b
	}
	for name, tc := range map[string]struct {
		in   []byte
		want string
	}{
		"short":     {good[:len(good)-1], "read the host's wake record"},
		"empty":     {nil, "read the host's wake record"},
		"magic":     {edit(func(b []byte) { b[0] = 'X' }), "record belongs"},
		"parked":    {ParkedRecord(), "record belongs"},
		"malformed": {[]byte(wakeMagic + "\x02\x08\x80"), "malformed"},
		"version":   {rawRecord(t, wakeMagic, &Wake{Version: 1, Entropy: make([]byte, WakeEntropySize)}), "version 1"},
		"entropy":   {rawRecord(t, wakeMagic, &Wake{Version: ParkVersion, Entropy: make([]byte, 31)}), "31 bytes of entropy"},
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
	r := bytes.NewReader(append(ParkedRecord(), "AIRLKMUX"...))
	if err := ReadParked(r); err != nil {
		t.Fatal(err)
	}
	if r.Len() != len("AIRLKMUX") {
		t.Errorf("ReadParked read %d bytes past its record", len("AIRLKMUX")-r.Len())
	}
	for name, tc := range map[string]struct {
		in   []byte
		want string
	}{
		"short":   {ParkedRecord()[:len(ParkedRecord())-1], "read the parked guest's parked record"},
		"hello":   {[]byte("AIRLKMUX\x03\x00\x01\x02\x03\x04\x05\x06"), "record belongs"},
		"old":     {[]byte("AIRLKPRK\x01\x00\x00\x00\x00\x00\x00\x00"), "rebuild it: make image"},
		"version": {rawRecord(t, parkedMagic, &Parked{Version: 7}), "version 7"},
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
// as a Wake that WakeRecord writes back, never more than the record's
// bytes read.
func FuzzReadWake(f *testing.F) {
	good, _ := WakeRecord(testWake())
	f.Add(good)
	f.Add(ParkedRecord())
	f.Add([]byte{})
	f.Add([]byte(wakeMagic + "\xff"))
	f.Fuzz(func(t *testing.T, in []byte) {
		r := &countingReader{r: bytes.NewReader(in)}
		w, err := ReadWake(r)
		if r.n > parkHeader+255 || (err == nil && r.n != parkHeader+int(in[len(wakeMagic)])) {
			t.Fatalf("read %d bytes of %x", r.n, in)
		}
		if err != nil {
			return
		}
		b, err := WakeRecord(w)
		if err != nil {
			t.Fatalf("accepted %+v, which WakeRecord refuses: %v", w, err)
		}
		back, err := ReadWake(bytes.NewReader(b))
		if err != nil || back.UnixNanos != w.UnixNanos || !bytes.Equal(back.Entropy, w.Entropy) {
			t.Fatalf("accepted %+v does not round-trip: %+v %v", w, back, err)
		}
	})
}
