package egress

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/app/egress/intercept"
)

// upstream is a plain-HTTP connection kept between requests of one
// keep-alive guest connection.
type upstream struct {
	key  string // target host:port
	addr netip.Addr
	conn net.Conn
	br   *bufio.Reader
}

// httpConn is one guest connection to the HTTP proxy.
type httpConn struct {
	g  *Gate
	c  net.Conn
	br *bufio.Reader
	up *upstream // kept between plain-HTTP requests; nil when none is
}

// handleHTTP serves one guest connection to the HTTP proxy.
func (g *Gate) handleHTTP(c net.Conn) {
	h := &httpConn{g: g, c: c, br: bufio.NewReaderSize(c, g.limits.MaxHeaderBytes)}
	defer h.dropUpstream()
	h.serve()
}

// serve serves any number of absolute-URI requests, or one CONNECT.
func (h *httpConn) serve() {
	g, c, br := h.g, h.c, h.br
	for first := true; ; first = false {
		c.SetReadDeadline(time.Now().Add(g.limits.IdleTimeout))
		if _, err := br.Peek(1); err != nil {
			if first && isTimeout(err) {
				g.record(Decision{Time: g.now(), Protocol: ProtoHTTP, Reason: ReasonTimeout, Detail: "no request"})
			}
			return
		}
		start := g.now()
		c.SetReadDeadline(time.Now().Add(g.limits.HeaderTimeout))
		pr, err := readProxyRequest(br, g.limits.MaxHeaderBytes)
		c.SetReadDeadline(time.Time{})
		d := Decision{Time: start, Protocol: ProtoHTTP}
		if pr != nil {
			d.Protocol, d.Host, d.Port = pr.proto, pr.target.Host, pr.target.Port
			if d.Protocol == "" {
				d.Protocol = ProtoHTTP
			}
		}
		if err != nil {
			var re *requestError
			switch {
			case errors.As(err, &re):
			case isTimeout(err):
				re = &requestError{reason: ReasonTimeout, status: http.StatusRequestTimeout, msg: "request head not received in time"}
			default:
				re = badRequest("%v", err)
			}
			if pr != nil {
				d.Task, _ = g.creds.authenticate(pr.user, pr.pass, pr.cred)
			}
			d.Reason, d.Detail = re.reason, re.msg
			h.refuse(d, re.status, false)
			return
		}
		task, ok := g.creds.authenticate(pr.user, pr.pass, pr.cred)
		if !ok {
			d.Reason, d.Detail = ReasonAuthFailed, "missing or unknown proxy credential"
			h.refuse(d, http.StatusProxyAuthRequired, pr.req.ContentLength == 0 && !pr.req.Close)
			if pr.req.ContentLength != 0 || pr.req.Close {
				return
			}
			continue
		}
		d.Task = task
		if pr.proto == ProtoConnect {
			h.dropUpstream()
			h.connect(pr, d)
			return
		}
		if !h.forward(pr, d) {
			return
		}
	}
}

// connect decides and serves a CONNECT tunnel.
func (h *httpConn) connect(pr *proxyRequest, d Decision) {
	g, c, br := h.g, h.c, h.br
	pl := g.decide(g.ctx, d.Task, ProtoConnect, pr.target)
	d.Rule, d.Detail = pl.rule, pl.detail
	d.Addr = addrText(pl.addr)
	if !pl.reason.allowed() {
		d.Reason = pl.reason
		h.refuse(d, statusFor(pl.reason), false)
		return
	}
	if g.tls.intercepts(pr.target) {
		g.intercept(c, br, pr.target, pl, d, httpTunnelReply(c, g.service))
		return
	}
	uc, addr, err := g.dial(g.ctx, pl, pr.target.Port)
	d.Addr = addrText(addr)
	if err != nil {
		d.Reason, d.Detail = ReasonDialFailed, err.Error()
		h.refuse(d, http.StatusBadGateway, false)
		return
	}
	if !g.live.track(nil, uc) {
		uc.Close()
		d.Reason, d.Detail = ReasonShutdown, "gate closed"
		g.record(d)
		return
	}
	defer g.live.untrack(nil, uc)
	d.Reason = pl.reason
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\nX-Airlock-Decision: "+decisionHeader(d)+"\r\n\r\n"); err != nil {
		d.Detail = "guest went away: " + err.Error()
		g.record(d)
		return
	}
	d.BytesUp, d.BytesDown = relay(c, br, uc)
	g.record(d)
}

// forward decides one absolute-URI request and relays it and its response,
// reusing the upstream connection when the same host:port is asked again.
// It reports whether the guest connection can carry another request.
func (h *httpConn) forward(pr *proxyRequest, d Decision) bool {
	g, c := h.g, h.c
	req := pr.req
	keep := !req.Close
	pl := g.decide(g.ctx, d.Task, ProtoHTTP, pr.target)
	d.Rule, d.Detail = pl.rule, pl.detail
	d.Addr = addrText(pl.addr)
	if !pl.reason.allowed() {
		d.Reason = pl.reason
		// A body not read would be taken for the next request: only a
		// bodiless request keeps the connection.
		keep = keep && req.ContentLength == 0
		h.refuse(d, statusFor(pl.reason), keep)
		return keep
	}
	// Plain HTTP never carries a secret: a placeholder here is refused,
	// whatever the destination.
	set := g.tls.secrets.Load()
	if _, _, err := set.Apply(req, pr.target, false); err != nil {
		d.Reason, d.Detail = ReasonPlaceholder, err.Error()
		keep = keep && req.ContentLength == 0
		h.refuse(d, http.StatusForbidden, keep)
		return keep
	}
	var scan *intercept.ScanReader
	if req.Body != nil && req.Body != http.NoBody && set.Len() > 0 {
		scan = set.ScanBody(req.Body, pr.target, false)
		req.Body = io.NopCloser(scan)
		req.Trailer = nil // trailers arrive after the scan: not passed on
	}
	key := pr.target.String()
	if u := h.up; u != nil && (u.key != key || !containsAddr(pl.addrs, u.addr)) {
		h.dropUpstream()
	}
	if h.up == nil {
		uc, addr, err := g.dial(g.ctx, pl, pr.target.Port)
		d.Addr = addrText(addr)
		if err != nil {
			d.Reason, d.Detail = ReasonDialFailed, err.Error()
			keep = keep && req.ContentLength == 0
			h.refuse(d, http.StatusBadGateway, keep)
			return keep
		}
		if !g.live.track(nil, uc) {
			uc.Close()
			d.Reason, d.Detail = ReasonShutdown, "gate closed"
			g.record(d)
			return false
		}
		h.up = &upstream{key: key, addr: addr, conn: uc, br: bufio.NewReaderSize(uc, g.limits.MaxHeaderBytes)}
	}
	u := h.up
	d.Addr = u.addr.String()
	d.Reason = pl.reason

	if strings.EqualFold(req.Header.Get("Expect"), "100-continue") {
		// Answer for the upstream, so the guest does not wait for a 100
		// that a sequential relay would never pass on.
		io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\n")
	}
	req.Header.Del("Expect")
	removeHopHeaders(req.Header)
	if _, ok := req.Header["User-Agent"]; !ok {
		req.Header["User-Agent"] = []string{""} // keep net/http from adding its own
	}
	// Values never travel in plain HTTP, but a secret's host may hold one
	// (sent earlier over HTTPS) and serve it here: its answers are
	// searched too.
	red := set.Redactor(pr.target, nil)
	if red != nil {
		req.Header["Accept-Encoding"] = []string{"identity"}
	}
	req.Close = false
	var err error
	d.BytesUp, err = writeRequest(u.conn, req)
	if scan != nil && scan.Refusal() != nil {
		h.dropUpstream()
		d.Reason = ReasonPlaceholder
		d.Detail = scan.Refusal().Error()
		h.refuse(d, http.StatusForbidden, false)
		return false
	}
	if err != nil {
		return h.upstreamFailed(d, fmt.Errorf("write request: %w", err), false)
	}
	u.conn.SetReadDeadline(time.Now().Add(g.limits.ResponseTimeout))
	resp, err := readResponse(u.br, req, g.limits.MaxHeaderBytes)
	u.conn.SetReadDeadline(time.Time{})
	if err != nil {
		return h.upstreamFailed(d, fmt.Errorf("read response: %w", err), false)
	}
	defer resp.Body.Close()
	upstreamClose := resp.Close
	removeHopHeaders(resp.Header)
	if red != nil {
		if err := red.Response(resp); err != nil {
			return h.upstreamFailed(d, err, false)
		}
	}
	resp.ProtoMajor, resp.ProtoMinor, resp.Proto = 1, 1, "HTTP/1.1"
	untilEOF := resp.ContentLength < 0 && !isChunked(resp.TransferEncoding) && resp.Body != http.NoBody
	keep = keep && !untilEOF
	resp.Close = !keep
	d.BytesDown, err = writeResponse(c, resp)
	if red != nil {
		if note := intercept.EchoNote(red.Hits()); note != "" {
			d.Detail = note
			g.logger.Warn("egress: a secret's host echoed its value; the guest got the placeholder", "host", pr.target.Host, "detail", note)
		}
	}
	if err != nil {
		return h.upstreamFailed(d, fmt.Errorf("relay response: %w", err), true)
	}
	if upstreamClose || untilEOF {
		h.dropUpstream()
	}
	g.record(d)
	return keep
}

// readResponse reads a response head of bounded size, skipping 1xx
// interim responses.
func readResponse(br *bufio.Reader, req *http.Request, limit int) (*http.Response, error) {
	for {
		if _, err := waitHead(br, limit); err != nil {
			return nil, err
		}
		resp, err := http.ReadResponse(br, req)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode >= 200 || resp.StatusCode < 100 {
			return resp, nil
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			resp.Body.Close()
			return nil, errors.New("unexpected 101 Switching Protocols")
		}
		resp.Body.Close()
	}
}

// upstreamFailed records an exchange the upstream broke. Before any of the
// response reached the guest it answers 502; after, it can only close.
func (h *httpConn) upstreamFailed(d Decision, err error, started bool) bool {
	h.dropUpstream()
	d.Detail = err.Error()
	if started {
		h.g.record(d) // allowed; the detail says how it ended
		return false
	}
	d.Reason = ReasonUpstreamError
	h.refuse(d, http.StatusBadGateway, false)
	return false
}

func (h *httpConn) dropUpstream() {
	if h.up != nil {
		h.g.live.untrack(nil, h.up.conn)
		h.up = nil
	}
}

// statusFor maps a refusal reason to an HTTP status.
func statusFor(r Reason) int {
	switch r {
	case ReasonBadRequest, ReasonHostMismatch:
		return http.StatusBadRequest
	case ReasonResolveFailed, ReasonDialFailed, ReasonUpstreamError, ReasonUpstreamCert:
		return http.StatusBadGateway
	case ReasonAuthFailed:
		return http.StatusProxyAuthRequired
	case ReasonTimeout:
		return http.StatusRequestTimeout
	case ReasonHeaderTooLarge:
		return http.StatusRequestHeaderFieldsTooLarge
	case ReasonShutdown:
		return http.StatusServiceUnavailable
	}
	return http.StatusForbidden
}

// refuse answers a refused request with a plain-text explanation and
// the X-Airlock-Decision header, and records the decision.
func (h *httpConn) refuse(d Decision, status int, keep bool) {
	h.g.record(d)
	body := refusalText(d, h.g.service)
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\n", status, http.StatusText(status))
	b.WriteString("Content-Type: text/plain; charset=utf-8\r\n")
	b.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\n")
	b.WriteString("X-Airlock-Decision: " + decisionHeader(d) + "\r\n")
	if status == http.StatusProxyAuthRequired {
		b.WriteString("Proxy-Authenticate: Basic realm=\"airlock\"\r\n")
	}
	if !keep {
		b.WriteString("Connection: close\r\n")
	}
	b.WriteString("\r\n")
	b.WriteString(body)
	h.c.SetWriteDeadline(time.Now().Add(h.g.limits.HeaderTimeout))
	io.WriteString(h.c, b.String())
	h.c.SetWriteDeadline(time.Time{})
}

// decisionHeader is the X-Airlock-Decision value: "deny; reason=CODE".
func decisionHeader(d Decision) string {
	a := ActionDeny
	if d.Reason.allowed() {
		a = ActionAllow
	}
	return string(a) + "; reason=" + string(d.Reason)
}

// refusalText says what was blocked and what to do about it, in the
// commands of the path the guest's owner is on: `airlock egress` for the
// service's sandbox, run's flags for a run with a VM of its own.
func refusalText(d Decision, service bool) string {
	t := d.Host
	if d.Port != 0 {
		if strings.Contains(t, ":") {
			t = "[" + t + "]"
		}
		t += ":" + strconv.Itoa(int(d.Port))
	}
	if t == "" {
		t = "the request"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "airlock: %s blocked (%s)", t, d.Reason)
	if d.Detail != "" {
		b.WriteString(": " + d.Detail)
	}
	b.WriteString(".\n")
	switch {
	case (d.Reason == ReasonNoMatchingRule || d.Reason == ReasonAskDenied || d.Reason == ReasonAskTimeout) && service:
		fmt.Fprintf(&b, "To allow it: airlock egress allow %s\n", d.Host)
	case d.Reason == ReasonNoMatchingRule || d.Reason == ReasonAskDenied || d.Reason == ReasonAskTimeout:
		fmt.Fprintf(&b, "To allow it: airlock run --allow %s ...\n", d.Host)
	case (d.Reason == ReasonPrivateAddress || d.Reason == ReasonMetadataAddress) && strings.HasPrefix(d.Rule, "map-host ") && d.Port != 0:
		// A pinned name: the pin is there, the port is not allowed.
		b.WriteString("A pin says where a name goes, not which ports are open. To allow this port: ")
		if service {
			fmt.Fprintf(&b, "airlock egress allow %s\n", t)
		} else {
			fmt.Fprintf(&b, "airlock run --allow %s ...\n", t)
		}
	case d.Reason == ReasonPrivateAddress || d.Reason == ReasonMetadataAddress:
		a := d.Addr
		if a == "" {
			a = d.Host
		}
		if service {
			fmt.Fprintf(&b, "This address is refused unless allowed explicitly: airlock egress allow %s\n", a)
		} else {
			fmt.Fprintf(&b, "This address is refused unless allowed explicitly: airlock run --allow %s ... (or --map-host NAME=%s)\n", a, a)
		}
	case d.Reason == ReasonDeniedByRule && service:
		fmt.Fprintf(&b, "The deny rule %s wins over any allow rule; to allow this: airlock egress remove %s\n", d.Rule, d.Rule)
	case d.Reason == ReasonDeniedByRule:
		fmt.Fprintf(&b, "The deny rule %s wins over any allow rule; remove it to allow this.\n", d.Rule)
	case d.Reason == ReasonAuthFailed:
		b.WriteString("Use the proxy URL (with its credential) from HTTP_PROXY / HTTPS_PROXY.\n")
	case d.Reason == ReasonHostMismatch:
		b.WriteString("The Host header must name the same host and port as the request target.\n")
	case d.Reason == ReasonPlaceholder:
		b.WriteString("Secret placeholders are replaced only in HTTPS requests to the secret's hosts (airlock secret list).\n")
	case d.Reason == ReasonUpstreamCert && service:
		b.WriteString("Airlock verifies this server's certificate itself. If a corporate proxy or private CA signs it, add that CA to upstream_cas in the settings.\n")
	case d.Reason == ReasonUpstreamCert:
		b.WriteString("Airlock verifies this server's certificate itself. If a corporate proxy or private CA signs it, add that CA: airlock run --upstream-ca FILE (or upstream_cas in the settings).\n")
	}
	return b.String()
}

// addrText is a.String(), or "" for the zero Addr.
func addrText(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}

func containsAddr(list []netip.Addr, a netip.Addr) bool {
	for _, x := range list {
		if x == a {
			return true
		}
	}
	return false
}

func isChunked(te []string) bool { return len(te) > 0 && te[0] == "chunked" }

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}
