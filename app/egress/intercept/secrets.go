package intercept

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"strings"

	"github.com/airlock-sandbox/airlock/app/egress/policy"
)

// Secret is a credential the gate adds to requests on their way out. The
// guest only ever holds Placeholder; Value stays in the host's memory and is
// never logged.
type Secret struct {
	// Name identifies the secret in the log and in refusals.
	Name string
	// Hosts are the entries (policy.ParseEntry grammar: example.com,
	// *.example.com, optional :port) the value may be sent to.
	Hosts []string
	// Header, if set, is a template such as "Authorization: Bearer {}":
	// the gate sets that header, with {} replaced by the value, on every
	// request to the secret's hosts, and puts the value nowhere else (a
	// placeholder elsewhere in such a request goes out as it is). Without
	// a template the placeholder is replaced wherever it appears in a
	// header value (inside Basic credentials too) or the URL query, as
	// the client put it there. Either way the value is looked for in the
	// answers of the secret's hosts and replaced by the placeholder.
	Header string
	// Placeholder is what the guest holds instead of the value.
	Placeholder string
	// Value is the real secret.
	Value []byte
}

// MinPlaceholder is the shortest placeholder accepted: shorter ones could
// occur by chance.
const MinPlaceholder = 16

// secret is a checked Secret.
type secret struct {
	Secret
	hosts             []policy.Entry
	lower             []byte // lower-case placeholder
	hdrName           string // canonical header name, "" without a template
	hdrPrefix, hdrEnd string // the template's text around {}
}

// Secrets is the gate's secrets, replaced as a whole.
type Secrets struct {
	list   []*secret
	maxLen int // longest placeholder
}

// ParseHeaderTemplate splits "Name: prefix{}suffix" into the canonical
// header name and the text around {}.
func ParseHeaderTemplate(t string) (name, prefix, suffix string, err error) {
	n, v, ok := strings.Cut(t, ":")
	n = strings.TrimSpace(n)
	if !ok || n == "" || !validHeaderName(n) {
		return "", "", "", fmt.Errorf("header %q: expected 'Name: value with {}', e.g. 'Authorization: Bearer {}'", t)
	}
	v = strings.TrimLeft(v, " \t")
	if strings.Count(v, "{}") != 1 {
		return "", "", "", fmt.Errorf("header %q: the value must hold {} exactly once (where the secret goes)", t)
	}
	if strings.ContainsAny(v, "\r\n\x00") {
		return "", "", "", fmt.Errorf("header %q: no line breaks allowed", t)
	}
	switch strings.ToLower(n) {
	case "host", "content-length", "transfer-encoding", "connection", "proxy-connection", "keep-alive",
		"proxy-authenticate", "proxy-authorization", "te", "trailer", "upgrade", "expect":
		return "", "", "", fmt.Errorf("header %q: %s cannot carry a secret", t, n)
	}
	prefix, suffix, _ = strings.Cut(v, "{}")
	return textproto.CanonicalMIMEHeaderKey(n), prefix, suffix, nil
}

func validHeaderName(n string) bool {
	for _, c := range []byte(n) {
		if c <= ' ' || c >= 0x7f || strings.IndexByte("()<>@,;:\\\"/[]?={}", c) >= 0 {
			return false
		}
	}
	return true
}

// NewSecrets checks secrets: names unique, placeholders long enough,
// distinct and free of characters that would change in transit, hosts
// parsed, header templates valid.
func NewSecrets(in []Secret) (*Secrets, error) {
	s := &Secrets{}
	seen := map[string]bool{}
	var errs []error
	for _, sec := range in {
		x := &secret{Secret: sec, lower: []byte(strings.ToLower(sec.Placeholder))}
		bad := func(format string, a ...any) {
			errs = append(errs, fmt.Errorf("secret %q: %s", sec.Name, fmt.Sprintf(format, a...)))
		}
		if sec.Name == "" || seen["n"+sec.Name] {
			bad("missing or repeated name")
			continue
		}
		seen["n"+sec.Name] = true
		if len(sec.Placeholder) < MinPlaceholder || strings.Trim(strings.ToLower(sec.Placeholder), "abcdefghijklmnopqrstuvwxyz0123456789_-") != "" {
			bad("placeholder must be at least %d letters, digits, '_' or '-'", MinPlaceholder)
			continue
		}
		if seen["p"+string(x.lower)] {
			bad("placeholder used by another secret")
			continue
		}
		seen["p"+string(x.lower)] = true
		if len(sec.Value) == 0 {
			bad("empty value")
			continue
		}
		if len(sec.Hosts) == 0 {
			bad("no host to send it to")
			continue
		}
		for _, h := range sec.Hosts {
			e, err := policy.ParseEntry(h)
			if err != nil {
				bad("host: %v", err)
				continue
			}
			x.hosts = append(x.hosts, e)
		}
		if sec.Header != "" {
			var err error
			if x.hdrName, x.hdrPrefix, x.hdrEnd, err = ParseHeaderTemplate(sec.Header); err != nil {
				bad("%v", err)
				continue
			}
		}
		s.list = append(s.list, x)
		s.maxLen = max(s.maxLen, len(x.lower))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return s, nil
}

// ForHost reports whether t is one of the hosts of any secret.
func (s *Secrets) ForHost(t policy.Target) bool {
	for _, x := range s.list {
		if x.allows(t) {
			return true
		}
	}
	return false
}

// Len is the number of secrets; a nil set has none.
func (s *Secrets) Len() int {
	if s == nil {
		return 0
	}
	return len(s.list)
}

func (x *secret) allows(t policy.Target) bool {
	for _, e := range x.hosts {
		if t.Matches(e) {
			return true
		}
	}
	return false
}

// find returns the first secret whose placeholder occurs in text, in any
// letter case.
func (s *Secrets) find(text []byte) *secret {
	if len(s.list) == 0 || len(text) < MinPlaceholder {
		return nil
	}
	low := bytes.ToLower(text)
	for _, x := range s.list {
		if bytes.Contains(low, x.lower) {
			return x
		}
	}
	return nil
}

// findIn looks for a placeholder in text and, where text is a Basic
// credential, in its decoded form too; each also percent-decoded, as a
// server would see it (repeatedly, for servers that decode twice).
func (s *Secrets) findIn(text string) *secret {
	for range maxUnescape + 1 {
		if x := s.find([]byte(text)); x != nil {
			return x
		}
		if scheme, rest, ok := strings.Cut(strings.TrimSpace(text), " "); ok && strings.EqualFold(scheme, "Basic") {
			if raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(rest)); err == nil {
				if x := s.find(unescape(raw)); x != nil {
					return x
				}
			}
		}
		next := string(unescape([]byte(text)))
		if next == text {
			break
		}
		text = next
	}
	return nil
}

// maxUnescape bounds how many rounds of percent-decoding findIn applies.
const maxUnescape = 3

// unescape decodes every valid %XX sequence in b and leaves the rest as
// it is (a lenient decoder: malformed escapes do not hide what follows).
func unescape(b []byte) []byte {
	i := bytes.IndexByte(b, '%')
	if i < 0 {
		return b
	}
	out := make([]byte, 0, len(b))
	out = append(out, b[:i]...)
	for ; i < len(b); i++ {
		if b[i] == '%' && i+2 < len(b) && isHex(b[i+1]) && isHex(b[i+2]) {
			out = append(out, unhex(b[i+1])<<4|unhex(b[i+2]))
			i += 2
			continue
		}
		out = append(out, b[i])
	}
	return out
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

// secretRefusal says which secret's placeholder was about to go where it
// must not.
type secretRefusal struct {
	name  string
	where string
	hosts []string
}

func (r *secretRefusal) Error() string {
	return fmt.Sprintf("the placeholder of secret %s was sent in the %s to a host it is not for (it may go only to %s)",
		r.name, r.where, strings.Join(r.hosts, ", "))
}

// Apply checks one request to t and adds the secrets meant for t. A
// placeholder of a secret not meant for t, in the request target, a header
// name or value (Basic credentials and percent-encoding decoded) is a
// refusal. For secrets meant for t, header templates are set; for those
// without a template, placeholders in header values and the query are
// replaced by the value. It returns the names of the secrets added, and
// the Basic credentials it rewrote (the text sent, and the guest's text),
// which the redactor of the answer turns back. tls says the request
// travels encrypted: without it no secret is added, and a placeholder even
// for t is refused.
func (s *Secrets) Apply(req *http.Request, t policy.Target, tls bool) ([]string, []Needle, error) {
	if s == nil || len(s.list) == 0 {
		return nil, nil, nil
	}
	refuse := func(x *secret, where string) error {
		r := &secretRefusal{name: x.Name, where: where}
		for _, e := range x.hosts {
			r.hosts = append(r.hosts, e.String())
		}
		if tls {
			return r
		}
		return fmt.Errorf("the placeholder of secret %s was sent in the %s of a plain-HTTP request: secrets are only added to HTTPS requests", x.Name, where)
	}
	check := func(text, where string) error {
		x := s.findIn(text)
		if x != nil && (!tls || !x.allows(t)) {
			return refuse(x, where)
		}
		return nil
	}
	if err := check(req.RequestURI, "request target"); err != nil {
		return nil, nil, err
	}
	if err := check(req.URL.String(), "request target"); err != nil {
		return nil, nil, err
	}
	if err := check(req.Host, "Host header"); err != nil {
		return nil, nil, err
	}
	for k, vs := range req.Header {
		if err := check(k, "header name"); err != nil {
			return nil, nil, err
		}
		// Joined as well, so a placeholder split over repeated header
		// lines that a server would join with ", " is still found.
		if err := check(strings.Join(vs, ""), k+" header"); err != nil {
			return nil, nil, err
		}
		for _, v := range vs {
			if err := check(v, k+" header"); err != nil {
				return nil, nil, err
			}
		}
	}
	if !tls {
		return nil, nil, nil
	}
	var used []string
	var basic []Needle
	for _, x := range s.list {
		if !x.allows(t) {
			continue
		}
		if x.hdrName != "" {
			// The template is the one place the value goes.
			req.Header[x.hdrName] = []string{x.hdrPrefix + string(x.Value) + x.hdrEnd}
			used = append(used, x.Name)
			continue
		}
		n := 0
		for k, vs := range req.Header {
			for i, v := range vs {
				if nv, c := replaceFold(v, x.lower, x.Value); c > 0 {
					vs[i], n = nv, n+c
				} else if nv, ok := replaceBasic(v, x); ok {
					basic = append(basic, Needle{from: []byte(credentialOf(nv)), to: []byte(credentialOf(v)), name: x.Name})
					vs[i], n = nv, n+1
				}
			}
			req.Header[k] = vs
		}
		if q, c := replaceFold(req.URL.RawQuery, x.lower, []byte(urlQueryEscape(x.Value))); c > 0 {
			req.URL.RawQuery, n = q, n+c
		}
		if n > 0 {
			used = append(used, x.Name)
		}
	}
	return used, basic, nil
}

// credentialOf is the base64 text of a Basic credential header value.
func credentialOf(v string) string {
	_, rest, _ := strings.Cut(strings.TrimSpace(v), " ")
	return strings.TrimSpace(rest)
}

// replaceFold replaces every case-insensitive occurrence of lower in s.
func replaceFold(s string, lower, with []byte) (string, int) {
	if len(s) < len(lower) {
		return s, 0
	}
	low := bytes.ToLower([]byte(s)) // ASCII placeholders: byte offsets agree
	if len(low) != len(s) || !bytes.Contains(low, lower) {
		return s, 0
	}
	var b strings.Builder
	n, i := 0, 0
	for {
		j := bytes.Index(low[i:], lower)
		if j < 0 {
			break
		}
		b.WriteString(s[i : i+j])
		b.Write(with)
		i += j + len(lower)
		n++
	}
	b.WriteString(s[i:])
	return b.String(), n
}

// replaceBasic replaces the placeholder inside a Basic credential.
func replaceBasic(v string, x *secret) (string, bool) {
	scheme, rest, ok := strings.Cut(strings.TrimSpace(v), " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return v, false
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(rest))
	if err != nil {
		return v, false
	}
	nv, c := replaceFold(string(raw), x.lower, x.Value)
	if c == 0 {
		return v, false
	}
	return scheme + " " + base64.StdEncoding.EncodeToString([]byte(nv)), true
}

func urlQueryEscape(v []byte) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for _, c := range v {
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("-_.~", c) >= 0 {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}
