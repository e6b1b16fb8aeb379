package api

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzReadReady feeds the host's readiness decoder what a guest might send
// on PortReady: it must refuse without panicking, never read past its
// bound, and accept only what WriteReady could have written.
func FuzzReadReady(f *testing.F) {
	var good bytes.Buffer
	WriteReady(&good, Ready{AgentVersion: "v1.2.3", BootMillis: 812, AgentInstance: 7})
	for _, s := range []string{
		good.String(), "", "\x0a\x00", "\x0a\x02\xff\xfe", "\x0a\x80", "\x10\x01",
		"\x0a\x81\x01" + strings.Repeat("v", 129), strings.Repeat("\x0b", 5000),
		good.String() + "\x18\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01" + "\xfa\x01\x02hi",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		r := &countingReader{r: bytes.NewReader(in)}
		ready, err := ReadReady(r)
		if r.n > MaxReadySize+1 {
			t.Fatalf("read %d bytes, bound %d", r.n, MaxReadySize)
		}
		if err != nil {
			return
		}
		if v := ready.AgentVersion; v == "" || len(v) > 128 || !utf8.ValidString(v) {
			t.Fatalf("accepted agent version %q", v)
		}
		var again bytes.Buffer
		if err := WriteReady(&again, ready); err != nil {
			t.Fatal(err)
		}
		back, err := ReadReady(&again)
		if err != nil || back.AgentVersion != ready.AgentVersion || back.BootMillis != ready.BootMillis || back.AgentInstance != ready.AgentInstance {
			t.Fatalf("accepted %+v does not round-trip: %+v %v", &ready, &back, err)
		}
	})
}

func TestReadReady(t *testing.T) {
	var good bytes.Buffer
	if err := WriteReady(&good, Ready{AgentVersion: "v1", BootMillis: 812, AgentInstance: 9}); err != nil {
		t.Fatal(err)
	}
	r, err := ReadReady(&good)
	if err != nil || r.AgentVersion != "v1" || r.BootMillis != 812 || r.AgentInstance != 9 {
		t.Fatalf("ReadReady = %+v, %v", &r, err)
	}
	if _, err := ReadReady(strings.NewReader(`{"agent_version":"v1","boot_ms":5}` + "\n")); err == nil || !strings.Contains(err.Error(), "make image") {
		t.Errorf("an older image's JSON ready message: %v", err)
	}
	for name, in := range map[string]string{
		"empty":        "",
		"no version":   "\x10\x05",
		"truncated":    "\x0a\x05v1",
		"not UTF-8":    "\x0a\x02\xff\xfe",
		"too long":     strings.Repeat("\x18\x01", MaxReadySize),
		"long version": "\x0a\x81\x01" + strings.Repeat("v", 129),
	} {
		if _, err := ReadReady(strings.NewReader(in)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

type countingReader struct {
	r interface{ Read([]byte) (int, error) }
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}
