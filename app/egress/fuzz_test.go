package egress

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/airlock-sandbox/airlock/app/egress/policy"
)

func FuzzReadProxyRequest(f *testing.F) {
	for _, s := range []string{
		"GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n",
		"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\nProxy-Authorization: Basic dTpw\r\n\r\n",
		"POST http://[::1]:8080/x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
		"GET http://a/ HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
		"GET / HTTP/1.1\n\n",
		"GET http://bücher.example/ HTTP/1.0\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabc",
		"\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		const limit = 1024
		br := bufio.NewReaderSize(bytes.NewReader(data), limit)
		pr, err := readProxyRequest(br, limit)
		if err != nil {
			var re *requestError
			if errors.As(err, &re) && (re.status < 400 || re.reason == "") {
				t.Fatalf("refusal without status or reason: %+v", re)
			}
			return
		}
		if pr.target.Port == 0 || pr.target.Host == "" {
			t.Fatalf("accepted request without a target: %+v", pr.target)
		}
		if n, err := policy.NormalizeHost(pr.target.Host); err != nil || n != pr.target.Host {
			t.Fatalf("target host %q not normalised (%q, %v)", pr.target.Host, n, err)
		}
		if pr.proto == ProtoHTTP {
			removeHopHeaders(pr.req.Header)
			io.Copy(io.Discard, pr.req.Body)
		}
	})
}

func FuzzSOCKSHandshake(f *testing.F) {
	f.Add([]byte{5, 1, 0, 5, 1, 0, 3, 11, 'e', 'x', 'a', 'm', 'p', 'l', 'e', '.', 'c', 'o', 'm', 1, 187})
	f.Add([]byte{5, 1, 2, 1, 1, 'u', 1, 'p', 5, 1, 0, 1, 127, 0, 0, 1, 0, 80})
	f.Add([]byte{5, 2, 0, 2, 1, 0, 0, 5, 1, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 187})
	f.Add([]byte{5, 1, 0, 5, 2, 0, 1, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{4, 1, 0, 80, 127, 0, 0, 1, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		var out bytes.Buffer
		rw := struct {
			io.Reader
			io.Writer
		}{bytes.NewReader(data), &out}
		auth := func(user, pass string, present bool) (string, bool) {
			return "task", !present || user == "u" && pass == "p"
		}
		r, err := socksHandshake(rw, auth)
		if out.Len() > 4 {
			t.Fatalf("handshake wrote %d bytes before the final reply", out.Len())
		}
		if err == nil && (r.target.Port == 0 || r.target.Host == "") {
			t.Fatalf("accepted request without a target: %+v", r)
		}
		var se *socksError
		if errors.As(err, &se) && !se.replied && se.reply == 0 {
			t.Fatalf("error without a reply code: %+v", se)
		}
	})
}
