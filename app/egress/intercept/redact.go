package intercept

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/app/egress/policy"
)

// Needle is one text a Redactor replaces: a form of a secret's value
// (from), and what the guest gets instead (to). Secrets.Apply returns the
// ones a request carried beyond the secrets' own values.
type Needle struct {
	from, to []byte
	name     string // the secret's
}

// Redactor replaces the values of secrets in what a secret's host answers
// (status line, headers, body), so that a server echoing its input (an
// error page, a Location header, an "echo" endpoint) never hands the value
// to the guest. It is used for one response, from one goroutine.
type Redactor struct {
	needles []Needle
	hits    map[string]int // secret name -> replacements made
}

// Redactor returns the redactor for answers from t: the value of every
// secret t may receive, in the forms a server is likely to echo it, and
// extra (the exact texts this request carried); nil when t is no secret's
// host.
func (s *Secrets) Redactor(t policy.Target, extra []Needle) *Redactor {
	if s == nil {
		return nil
	}
	r := &Redactor{hits: map[string]int{}}
	for _, x := range s.list {
		if !x.allows(t) {
			continue
		}
		for _, f := range valueForms(x.Value) {
			r.needles = append(r.needles, Needle{from: f, to: []byte(x.Placeholder), name: x.Name})
		}
	}
	if len(r.needles) == 0 {
		return nil
	}
	for _, n := range extra {
		if len(n.from) > 0 && !bytes.Equal(n.from, n.to) {
			for _, f := range valueForms(n.from) {
				r.needles = append(r.needles, Needle{from: f, to: n.to, name: n.name})
			}
		}
	}
	// Longest first, so that at one position the longest form wins.
	slices.SortStableFunc(r.needles, func(a, b Needle) int { return len(b.from) - len(a.from) })
	return r
}

// valueForms are the texts a server may echo a value as: as it is,
// percent-encoded (upper and lower case hex, query and path escaping) and
// JSON-escaped.
func valueForms(v []byte) [][]byte {
	q := urlQueryEscape(v)
	forms := []string{string(v), q, strings.ToLower(q), url.QueryEscape(string(v)), url.PathEscape(string(v))}
	if j, err := json.Marshal(string(v)); err == nil {
		js := string(j[1 : len(j)-1])
		forms = append(forms, js, strings.ReplaceAll(js, "/", `\/`))
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if enc.Encode(string(v)) == nil {
		j := bytes.TrimSpace(b.Bytes())
		forms = append(forms, string(j[1:len(j)-1]))
	}
	var out [][]byte
	for _, f := range forms {
		if f != "" && !slices.ContainsFunc(out, func(o []byte) bool { return string(o) == f }) {
			out = append(out, []byte(f))
		}
	}
	return out
}

// replace returns b with every occurrence of a needle replaced, counting
// them. b is not changed; without an occurrence b itself is returned.
func (r *Redactor) replace(b []byte) []byte {
	var out []byte
	i := 0
	for {
		j, n := r.next(b[i:])
		if n == nil {
			break
		}
		if out == nil {
			out = make([]byte, 0, len(b))
		}
		out = append(out, b[i:i+j]...)
		out = append(out, n.to...)
		r.hits[n.name]++
		i += j + len(n.from)
	}
	if out == nil {
		return b
	}
	return append(out, b[i:]...)
}

// next returns the first occurrence of a needle in b (the longest at
// that position).
func (r *Redactor) next(b []byte) (int, *Needle) {
	best, pos := -1, -1
	for k := range r.needles {
		if j := bytes.Index(b, r.needles[k].from); j >= 0 && (pos < 0 || j < pos) {
			best, pos = k, j
		}
	}
	if best < 0 {
		return 0, nil
	}
	return pos, &r.needles[best]
}

// held returns how many bytes at the end of b could be the start of a
// needle: those must wait for the next read.
func (r *Redactor) held(b []byte) int {
	k := 0
	for _, n := range r.needles {
		for i := max(len(b)-len(n.from)+1, 0); i < len(b)-k; i++ {
			if b[i] == n.from[0] && bytes.HasPrefix(n.from, b[i:]) {
				k = len(b) - i
				break
			}
		}
	}
	return k
}

// Hits counts, by secret name, the values replaced so far.
func (r *Redactor) Hits() map[string]int { return r.hits }

func (r *Redactor) replaceString(s string) string { return string(r.replace([]byte(s))) }

// replaceName replaces needles in a header name in any letter case: names
// are canonicalised on the way (X-Echo-Sk-Live-…), which changes the case
// of a value echoed in one.
func (r *Redactor) replaceName(s string) string {
	for _, n := range r.needles {
		if ns, c := replaceFold(s, bytes.ToLower(n.from), n.to); c > 0 {
			s = ns
			r.hits[n.name] += c
		}
	}
	return s
}

// Response redacts a response before it is written to the guest: the
// status line and headers now, the body as it streams. Trailers (which
// arrive after the body) are dropped. A gzip body is decoded so it can be
// scanned; another content encoding cannot be scanned and is an error. A
// body of known length is sent chunked, since a replacement changes its
// length.
func (r *Redactor) Response(resp *http.Response) error {
	resp.Status = r.replaceString(resp.Status)
	h := make(http.Header, len(resp.Header))
	for k, vs := range resp.Header {
		nk := textproto.CanonicalMIMEHeaderKey(r.replaceName(k))
		for _, v := range vs {
			h[nk] = append(h[nk], r.replaceString(v))
		}
	}
	resp.Header = h
	resp.Trailer = nil
	if resp.Body == nil || resp.Body == http.NoBody {
		return nil
	}
	closeDelimited := resp.ContentLength < 0 && (len(resp.TransferEncoding) == 0 || resp.TransferEncoding[0] != "chunked")
	body := io.Reader(resp.Body)
	switch ce := strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding"))); ce {
	case "", "identity":
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			return fmt.Errorf("decode the gzip answer to look for secret values in it: %w", err)
		}
		body = zr
		resp.Header.Del("Content-Encoding")
		resp.Header.Del("Content-Length")
		resp.ContentLength = -1
	default:
		return fmt.Errorf("the answer is %s-encoded, so it cannot be searched for secret values; Airlock asks the hosts of secrets for unencoded answers (Accept-Encoding: identity)", ce)
	}
	if !closeDelimited {
		resp.Header.Del("Content-Length")
		resp.ContentLength = -1
		resp.TransferEncoding = []string{"chunked"}
	}
	resp.Body = redactBody{&redactReader{r: body, red: r}, resp.Body}
	return nil
}

type redactBody struct {
	io.Reader
	io.Closer
}

// redactReader streams a body through a redactor. It holds back only the
// bytes at the end of a read that could begin a value (so a streamed
// answer is not delayed when nothing in it looks like one), and never
// more than the longest needle, whatever the body's size.
type redactReader struct {
	r       io.Reader
	red     *Redactor
	scratch []byte
	buf     []byte // read, replaced, not yet passed on
	out     []byte // cleared to pass on
	err     error
}

func (rr *redactReader) Read(p []byte) (int, error) {
	for len(rr.out) == 0 {
		if rr.err != nil {
			return 0, rr.err
		}
		if rr.scratch == nil {
			rr.scratch = make([]byte, 32<<10)
		}
		n, err := rr.r.Read(rr.scratch)
		if err != nil {
			rr.err = err
		}
		if n == 0 && err == nil {
			continue
		}
		b := rr.red.replace(append(rr.buf, rr.scratch[:n]...))
		keep := 0
		if rr.err == nil {
			keep = rr.red.held(b)
		}
		rr.out = append(rr.out[:0], b[:len(b)-keep]...)
		rr.buf = append(rr.buf[:0:0], b[len(b)-keep:]...)
	}
	n := copy(p, rr.out)
	rr.out = rr.out[n:]
	return n, nil
}

// EchoNote says which secrets' values a host's answers held, for the
// decision log (names and counts, never values).
func EchoNote(hits map[string]int) string {
	var names []string
	for n, c := range hits {
		if c > 0 {
			names = append(names, fmt.Sprintf("%s (%d times)", n, c))
		}
	}
	if len(names) == 0 {
		return ""
	}
	slices.Sort(names)
	return "the answer held the value of secret " + strings.Join(names, ", ") + ": replaced by the placeholder"
}
