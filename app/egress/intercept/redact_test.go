package intercept

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

func testRedactor(t *testing.T, host string, extra ...Needle) *Redactor {
	t.Helper()
	r := mustSet(t, testSecrets()).Redactor(mustTarget(t, host), extra)
	if r == nil {
		t.Fatalf("no redactor for %s", host)
	}
	return r
}

func TestRedactorOnlyForASecretsHost(t *testing.T) {
	set := mustSet(t, testSecrets())
	if r := set.Redactor(mustTarget(t, "plain.test"), nil); r != nil {
		t.Fatalf("plain.test has a redactor: %+v", r)
	}
	var none *Secrets
	if none.Redactor(mustTarget(t, "api.test"), nil) != nil {
		t.Fatal("nil set has a redactor")
	}
	// api.test receives TOKEN only: OTHER's value is not its to hide.
	r := set.Redactor(mustTarget(t, "api.test"), nil)
	if got := string(r.replace([]byte("other-value " + testValue))); got != "other-value "+testPH {
		t.Fatalf("replace = %q", got)
	}
}

func TestRedactReaderAcrossReads(t *testing.T) {
	enc := url.QueryEscape(testValue + "/x")
	body := "head " + testValue + " mid " + strings.Repeat("z", 70000) + testValue + testValue + " json \"" + testValue + "\" tail " + testValue
	want := strings.ReplaceAll(body, testValue, testPH)
	readers := map[string]func(io.Reader) io.Reader{
		"whole":    func(r io.Reader) io.Reader { return r },
		"one byte": iotest.OneByteReader,
		"half":     iotest.HalfReader,
		"data err": iotest.DataErrReader,
	}
	for name, wrap := range readers {
		t.Run(name, func(t *testing.T) {
			r := testRedactor(t, "api.test")
			rr := &redactReader{r: wrap(strings.NewReader(body)), red: r}
			var out bytes.Buffer
			buf := make([]byte, 1000)
			for {
				n, err := rr.Read(buf)
				out.Write(buf[:n])
				if len(rr.buf) > len(testValue) {
					t.Fatalf("holds %d bytes back, more than a value", len(rr.buf))
				}
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			if out.String() != want {
				t.Fatalf("got %d bytes, value present: %v", out.Len(), strings.Contains(out.String(), testValue))
			}
			if r.hits["TOKEN"] != 5 {
				t.Fatalf("hits %v", r.hits)
			}
		})
	}
	// Encoded forms of a value with characters that need escaping.
	set := mustSet(t, []Secret{{Name: "S", Hosts: []string{"api.test"}, Placeholder: testPH, Value: []byte(testValue + "/x")}})
	r := set.Redactor(mustTarget(t, "api.test"), nil)
	for _, form := range []string{testValue + "/x", enc, urlQueryEscape([]byte(testValue + "/x")), strings.ToLower(urlQueryEscape([]byte(testValue + "/x"))), testValue + `\/x`} {
		rr := &redactReader{r: iotest.OneByteReader(strings.NewReader("[" + form + "]")), red: r}
		b, err := io.ReadAll(rr)
		if err != nil || string(b) != "["+testPH+"]" {
			t.Errorf("form %q: %q %v", form, b, err)
		}
	}
}

// TestRedactReaderDoesNotDelayStreams: an answer streamed in events (as
// server-sent events are) passes each event on at once when nothing at
// its end could begin a value.
func TestRedactReaderDoesNotDelayStreams(t *testing.T) {
	pr, pw := io.Pipe()
	rr := &redactReader{r: pr, red: testRedactor(t, "api.test")}
	go pw.Write([]byte("data: {\"token\": \"hi\"}\n\n"))
	got := make(chan string, 1)
	go func() {
		b := make([]byte, 100)
		n, _ := rr.Read(b)
		got <- string(b[:n])
	}()
	select {
	case s := <-got:
		if s != "data: {\"token\": \"hi\"}\n\n" {
			t.Fatalf("read %q", s)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("an event was held back")
	}
	// The start of a value is held until the rest shows whether it is one.
	go pw.Write([]byte("x " + testValue[:5]))
	b := make([]byte, 100)
	n, _ := rr.Read(b)
	if string(b[:n]) != "x " {
		t.Fatalf("read %q", b[:n])
	}
	go func() { pw.Write([]byte(testValue[5:] + "!")); pw.Close() }()
	rest, _ := io.ReadAll(rr)
	if string(rest) != testPH+"!" {
		t.Fatalf("rest %q", rest)
	}
}

func TestRedactResponse(t *testing.T) {
	basicSent := base64.StdEncoding.EncodeToString([]byte("u:" + testValue))
	basicGuest := base64.StdEncoding.EncodeToString([]byte("u:" + testPH))
	raw := "HTTP/1.1 302 Found " + testValue + "\r\n" +
		"Location: https://evil.test/?k=" + url.QueryEscape(testValue) + "\r\n" +
		"X-Echo-" + testValue + ": " + testValue + "\r\n" +
		"X-Basic: Basic " + basicSent + "\r\n" +
		"Content-Length: 27\r\n\r\n" +
		"body " + testValue + "!"
	resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(raw)), nil)
	if err != nil {
		t.Fatal(err)
	}
	r := testRedactor(t, "api.test", Needle{from: []byte(basicSent), to: []byte(basicGuest), name: "TOKEN"})
	if err := r.Response(resp); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	resp.Write(&out)
	if strings.Contains(strings.ToLower(out.String()), strings.ToLower(testValue)) || strings.Contains(out.String(), url.QueryEscape(testValue)) || strings.Contains(out.String(), basicSent) {
		t.Fatalf("the value is in:\n%s", out.String())
	}
	for _, want := range []string{"302 Found " + testPH, "Location: https://evil.test/?k=" + testPH, "X-Basic: Basic " + basicGuest,
		"Transfer-Encoding: chunked", "body " + testPH + "!"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no %q in:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "Content-Length") {
		t.Errorf("a length that no longer holds:\n%s", out.String())
	}
	if note := EchoNote(r.hits); !strings.Contains(note, "TOKEN (6 times)") || strings.Contains(note, testValue) {
		t.Errorf("note %q", note)
	}
}

func TestRedactResponseEncodings(t *testing.T) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	fmt.Fprintf(zw, "zipped %s", testValue)
	zw.Close()
	mk := func(enc string, body []byte) *http.Response {
		raw := fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Encoding: %s\r\nContent-Length: %d\r\n\r\n", enc, len(body))
		resp, err := http.ReadResponse(bufio.NewReader(io.MultiReader(strings.NewReader(raw), bytes.NewReader(body))), nil)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := mk("gzip", gz.Bytes())
	if err := testRedactor(t, "api.test").Response(resp); err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if string(b) != "zipped "+testPH || resp.Header.Get("Content-Encoding") != "" {
		t.Fatalf("gzip: %q %v", b, resp.Header)
	}
	if err := testRedactor(t, "api.test").Response(mk("br", []byte("xxxx"))); err == nil || !strings.Contains(err.Error(), "br-encoded") {
		t.Fatalf("br: %v", err)
	}
	if err := testRedactor(t, "api.test").Response(mk("gzip", []byte("not gzip"))); err == nil {
		t.Fatal("bad gzip accepted")
	}
}

// FuzzRedactReader: whatever the body and however it is split into reads,
// no value leaves the redactor, and a body without one passes unchanged.
func FuzzRedactReader(f *testing.F) {
	f.Add([]byte("abc"), []byte(testValue[:7]), uint8(3))
	f.Add([]byte(testValue[:20]), []byte(testValue[20:]+"x"), uint8(1))
	f.Add([]byte("sk-live-sk-live-"), []byte("REAL"), uint8(0))
	f.Fuzz(func(t *testing.T, a, b []byte, step uint8) {
		body := append(append(append([]byte{}, a...), testValue...), b...)
		body = append(body, a...)
		r := mustSet(t, testSecrets()).Redactor(mustTarget(t, "api.test"), nil)
		var src io.Reader = bytes.NewReader(body)
		if step%2 == 1 {
			src = iotest.OneByteReader(src)
		} else if step%4 == 2 {
			src = iotest.HalfReader(src)
		}
		out, err := io.ReadAll(&redactReader{r: src, red: r})
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(out, []byte(testValue)) {
			t.Fatalf("value passed: %q", out)
		}
		if want := r.replace(body); !bytes.Equal(out, want) && !bytes.Contains(want, []byte(testValue)) {
			t.Fatalf("streamed %q; whole %q", out, want)
		}
	})
}
