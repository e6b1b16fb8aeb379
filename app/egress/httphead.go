package egress

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"strings"

	"github.com/airlock-sandbox/airlock/app/egress/policy"
)

// errHeadTooLarge is returned when a head does not end within the limit.
var errHeadTooLarge = errors.New("head too large")

// requestError is a refusal found while reading a request: the reason to
// log and the HTTP status to answer with.
type requestError struct {
	reason Reason
	status int
	msg    string
}

func (e *requestError) Error() string { return string(e.reason) + ": " + e.msg }

func badRequest(format string, args ...any) *requestError {
	return &requestError{reason: ReasonBadRequest, status: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

// waitHead blocks until br holds a complete head (up to and including the
// empty line) of at most limit bytes, without consuming it, and returns its
// length. br must have a buffer of at least limit bytes. The scan resumes where
// it stopped, so a client sending one byte at a time costs linear work.
func waitHead(br *bufio.Reader, limit int) (int, error) {
	scanned := 0
	for n := 1; ; n = br.Buffered() + 1 {
		if n > limit {
			return 0, errHeadTooLarge
		}
		buf, err := br.Peek(n)
		if err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				return 0, errHeadTooLarge
			}
			return 0, err
		}
		buf, _ = br.Peek(br.Buffered())
		if len(buf) > limit {
			buf = buf[:limit]
		}
		from := max(scanned-2, 0)
		if i := bytes.Index(buf[from:], []byte("\n\r\n")); i >= 0 {
			return from + i + 3, nil
		}
		if i := bytes.Index(buf[from:], []byte("\n\n")); i >= 0 {
			return from + i + 2, nil
		}
		scanned = len(buf)
		if scanned >= limit {
			return 0, errHeadTooLarge
		}
	}
}

// proxyRequest is a request to the HTTP proxy, checked for form.
type proxyRequest struct {
	req    *http.Request
	proto  Protocol // ProtoHTTP or ProtoConnect
	target policy.Target
	user   string // from Proxy-Authorization
	pass   string
	cred   bool // a Proxy-Authorization header was present
}

// readProxyRequest reads one request head (at most limit bytes) from br and
// checks it is a proxy request: CONNECT host:port, or an absolute http://
// URI whose Host header, if any, agrees with it. The body is left to
// req.Body. Errors are *requestError, or the read error of the connection.
func readProxyRequest(br *bufio.Reader, limit int) (*proxyRequest, error) {
	n, err := waitHead(br, limit)
	if errors.Is(err, errHeadTooLarge) {
		return nil, &requestError{reason: ReasonHeaderTooLarge, status: http.StatusRequestHeaderFieldsTooLarge,
			msg: fmt.Sprintf("request head over %d bytes", limit)}
	}
	if err != nil {
		return nil, err
	}
	head, _ := br.Peek(n)
	// net/http drops the Host header of absolute-URI requests; read the
	// raw head first to see every Host line.
	hosts, err := rawHosts(head)
	if err != nil {
		return nil, badRequest("malformed head: %v", err)
	}
	if len(hosts) > 1 {
		return nil, &requestError{reason: ReasonHostMismatch, status: http.StatusBadRequest, msg: "more than one Host header"}
	}
	req, err := http.ReadRequest(br)
	if err != nil {
		return nil, badRequest("malformed request: %v", err)
	}
	pr := &proxyRequest{req: req}
	if auth := req.Header.Get("Proxy-Authorization"); auth != "" || len(req.Header["Proxy-Authorization"]) > 0 {
		var ok bool
		pr.cred = true
		if pr.user, pr.pass, ok = parseBasic(auth); !ok {
			pr.user, pr.pass = "", ""
		}
	}
	var defPort uint16
	switch {
	case req.Method == http.MethodConnect:
		pr.proto = ProtoConnect
		if req.URL.Scheme != "" || req.URL.Path != "" || req.URL.User != nil || req.URL.RawQuery != "" {
			return pr, badRequest("CONNECT needs host:port")
		}
	case req.URL.Scheme == "http" && req.URL.Host != "":
		pr.proto, defPort = ProtoHTTP, 80
		if req.URL.User != nil {
			return pr, badRequest("user info in the request URI")
		}
	case req.URL.Scheme == "https":
		return pr, badRequest("send https:// requests through CONNECT")
	case req.URL.Host == "":
		return pr, badRequest("not a proxy request: the target must be an absolute http:// URI or CONNECT host:port")
	default:
		return pr, badRequest("unsupported scheme %q", req.URL.Scheme)
	}
	host, port, err := policy.SplitHostPort(req.URL.Host)
	if err != nil {
		return pr, badRequest("target %q: %v", req.URL.Host, err)
	}
	if port == 0 {
		if defPort == 0 {
			return pr, badRequest("CONNECT needs host:port")
		}
		port = defPort
	}
	if pr.target, err = policy.NewTarget(host, port); err != nil {
		return pr, badRequest("target %q: %v", req.URL.Host, err)
	}
	if len(hosts) == 1 {
		if err := hostAgrees(hosts[0], pr.target, defPort); err != nil {
			return pr, &requestError{reason: ReasonHostMismatch, status: http.StatusBadRequest,
				msg: fmt.Sprintf("Host header %q disagrees with the target %s: %v", hosts[0], pr.target, err)}
		}
	}
	return pr, nil
}

// rawHosts returns every Host header value of a request head.
func rawHosts(head []byte) ([]string, error) {
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(head)))
	if _, err := tp.ReadLine(); err != nil {
		return nil, err
	}
	h, err := tp.ReadMIMEHeader()
	if err != nil {
		return nil, err
	}
	return h["Host"], nil
}

// hostAgrees compares a Host header with the target. Without a port the
// header means defPort; for CONNECT (defPort 0) a port-less header names
// the host only.
func hostAgrees(h string, t policy.Target, defPort uint16) error {
	host, port, err := policy.SplitHostPort(strings.TrimSpace(h))
	if err != nil {
		return err
	}
	ht, err := policy.NewTarget(host, max(port, 1))
	if err != nil {
		return err
	}
	if ht.Host != t.Host {
		return errors.New("different host")
	}
	if port == 0 {
		port = defPort
	}
	if port != 0 && port != t.Port {
		return errors.New("different port")
	}
	return nil
}

// parseBasic decodes a Basic credential.
func parseBasic(auth string) (user, pass string, ok bool) {
	scheme, rest, ok := strings.Cut(strings.TrimSpace(auth), " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return "", "", false
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(rest))
	if err != nil {
		return "", "", false
	}
	return strings.Cut(string(raw), ":")
}

// hopHeaders are removed in both directions (RFC 9110 7.6.1), together
// with every header the Connection header names.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// removeHopHeaders strips hop-by-hop headers from h.
func removeHopHeaders(h http.Header) {
	for _, v := range h.Values("Connection") {
		for _, f := range strings.Split(v, ",") {
			if f = textproto.TrimString(f); f != "" {
				h.Del(f)
			}
		}
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
}
