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
	WriteReady(&good, Ready{AgentVersion: "v1.2.3", BootMillis: 812})
	for _, s := range []string{
		good.String(), "", "null", "{}", `{"agent_version":7}`, `{"boot_ms":1e400}`,
		`{"agent_version":"` + strings.Repeat("v", 200) + `"}`, strings.Repeat("[", 5000),
		`{"agent_version":"\ud800","boot_ms":-1}{"x":1}`,
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
		if len(ready.AgentVersion) > 128 || !utf8.ValidString(ready.AgentVersion) {
			t.Fatalf("accepted agent version %q", ready.AgentVersion)
		}
		var again bytes.Buffer
		if err := WriteReady(&again, ready); err != nil {
			t.Fatal(err)
		}
		back, err := ReadReady(&again)
		if err != nil || back != ready {
			t.Fatalf("accepted %+v does not round-trip: %+v %v", ready, back, err)
		}
	})
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
