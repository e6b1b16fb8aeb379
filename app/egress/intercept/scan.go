package intercept

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/airlock-sandbox/airlock/app/egress/policy"
)

// ScanReader passes a request body through while looking for placeholders
// of the secrets that must not go to this destination, as they are and
// percent-decoded once (a form body). It holds back the last bytes of each
// read that could be the start of a placeholder, percent-encoded or not,
// so no part of a placeholder is passed on before it is recognised.
type ScanReader struct {
	r       io.Reader
	set     *Secrets
	allowed func(*secret) bool
	buf     []byte // bytes read, not yet passed on
	out     []byte // bytes cleared to pass on
	eof     bool
	err     error
	found   *secret
	tls     bool // the body travels encrypted (see Secrets.ScanBody)
}

// ScanBody wraps a request body to t. A placeholder of a secret not meant
// for t (with tls false, of any secret: plain HTTP never carries one) ends
// the body with an error, and Refusal then says which secret it was.
func (s *Secrets) ScanBody(r io.Reader, t policy.Target, tls bool) *ScanReader {
	sr := newScanReader(r, s, func(x *secret) bool { return tls && x.allows(t) })
	sr.tls = tls
	return sr
}

// Refusal says which secret's placeholder the body carried where it must
// not go, naming the secret (never its value); nil when none did.
func (s *ScanReader) Refusal() error {
	if s.found == nil {
		return nil
	}
	if !s.tls {
		return fmt.Errorf("the placeholder of secret %s was sent in the body of a plain-HTTP request: secrets are only added to HTTPS requests to their hosts", s.found.Name)
	}
	return &secretRefusal{name: s.found.Name, where: "body", hosts: hostStrings(s.found)}
}

func hostStrings(s *secret) []string {
	var out []string
	for _, e := range s.hosts {
		out = append(out, e.String())
	}
	return out
}

func newScanReader(r io.Reader, set *Secrets, allowed func(*secret) bool) *ScanReader {
	return &ScanReader{r: r, set: set, allowed: allowed}
}

// errPlaceholderInBody ends a body that carried a placeholder.
var errPlaceholderInBody = errors.New("placeholder in the request body")

func (s *ScanReader) Read(p []byte) (int, error) {
	for len(s.out) == 0 {
		if s.err != nil {
			return 0, s.err
		}
		if s.eof {
			return 0, io.EOF
		}
		chunk := make([]byte, 32<<10)
		n, err := s.r.Read(chunk)
		s.buf = append(s.buf, chunk[:n]...)
		if err == io.EOF {
			s.eof = true
		} else if err != nil {
			s.err = err
		}
		low := bytes.ToLower(s.buf)
		dec := bytes.ToLower(unescape(s.buf))
		for _, x := range s.set.list {
			if !s.allowed(x) && (bytes.Contains(low, x.lower) || bytes.Contains(dec, x.lower)) {
				s.found, s.err, s.buf = x, errPlaceholderInBody, nil
				return 0, s.err
			}
		}
		keep := 0
		if !s.eof {
			// Percent-encoded, a placeholder takes up to 3 bytes a letter.
			keep = min(len(s.buf), 3*s.set.maxLen-1)
		}
		s.out = append(s.out, s.buf[:len(s.buf)-keep]...)
		s.buf = append(s.buf[:0], s.buf[len(s.buf)-keep:]...)
	}
	n := copy(p, s.out)
	s.out = s.out[n:]
	return n, nil
}
