package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock/app/egress/intercept"
	"github.com/airlock-sandbox/airlock/app/egress/policy"
)

// prefixConn reads bytes already buffered from a connection before the
// connection itself.
type prefixConn struct {
	net.Conn
	r io.Reader
}

func (p prefixConn) Read(b []byte) (int, error) { return p.r.Read(b) }

// inspection is what the gate needs to terminate the guest's TLS: the
// installation CA, the roots real servers are verified with, the secrets,
// and whether every host is inspected.
type inspection struct {
	ca      *intercept.CA // nil: tunnels are never opened
	roots   *x509.CertPool
	secrets atomic.Pointer[intercept.Secrets]
	inspect atomic.Bool
}

// intercepts reports whether the gate terminates the TLS of a tunnel to t:
// when it has a CA and t is a host of some secret, or inspection is on.
func (in *inspection) intercepts(t policy.Target) bool {
	if in.ca == nil {
		return false
	}
	return in.inspect.Load() || in.secrets.Load().ForHost(t)
}

// tunnelReply answers the guest's tunnel request: success, or a refusal
// with its reason. It is the protocol-specific part (HTTP CONNECT or SOCKS).
type tunnelReply func(d Decision, ok bool) error

// intercept serves a tunnel to t whose TLS the gate terminates: it connects
// to the real server and verifies its certificate first (a server that
// fails verification is refused before the guest gets its tunnel), then
// accepts the guest's TLS with a leaf of the installation CA for t, and
// relays HTTP/1.1 requests one by one, adding the secrets meant for t and
// refusing any placeholder that is not.
func (g *Gate) intercept(c net.Conn, r io.Reader, t policy.Target, pl plan, d Decision, reply tunnelReply) {
	uc, addr, err := g.dial(g.ctx, pl, t.Port)
	d.Addr = addrText(addr)
	if err != nil {
		d.Reason, d.Detail = ReasonDialFailed, err.Error()
		reply(d, false)
		g.record(d)
		return
	}
	if !g.live.track(nil, uc) {
		uc.Close()
		d.Reason, d.Detail = ReasonShutdown, "gate closed"
		g.record(d)
		return
	}
	defer g.live.untrack(nil, uc)
	hctx, cancel := context.WithTimeout(g.ctx, g.limits.DialTimeout)
	up, err := intercept.Upstream(hctx, uc, t.Host, g.tls.roots)
	cancel()
	if err != nil {
		d.Reason = ReasonUpstreamCert
		d.Detail = fmt.Sprintf("TLS with %s failed: %v", t, err)
		reply(d, false)
		g.record(d)
		return
	}
	d.Reason = pl.reason
	if err := reply(d, true); err != nil {
		d.Detail = "guest went away: " + err.Error()
		g.record(d)
		return
	}
	gc, err := g.tls.ca.Accept(prefixConn{c, r}, t.Host, g.limits.HeaderTimeout)
	if err != nil {
		if sn := (*intercept.ServerNameError)(nil); errors.As(err, &sn) {
			d.Reason, d.Detail = ReasonHostMismatch, err.Error()
		} else {
			d.Reason, d.Detail = ReasonBadRequest, "TLS handshake with the guest failed (does it trust the Airlock CA?): "+err.Error()
		}
		g.record(d)
		return
	}
	d.Detail = "TLS inspected"
	x := &exchange{g: g, t: t, guest: gc, up: up, d: &d, echoes: map[string]int{},
		gbr: bufio.NewReaderSize(gc, g.limits.MaxHeaderBytes), ubr: bufio.NewReaderSize(up, g.limits.MaxHeaderBytes)}
	for x.next() {
	}
	if note := intercept.EchoNote(x.echoes); note != "" {
		d.Detail += "; " + note
		g.logger.Warn("egress: a secret's host echoed its value; the guest got the placeholder", "host", t.Host, "detail", note)
	}
	g.record(d)
}

// exchange relays the requests of one inspected tunnel.
type exchange struct {
	g        *Gate
	t        policy.Target
	guest    *tls.Conn
	up       *tls.Conn
	gbr, ubr *bufio.Reader
	d        *Decision      // the tunnel's decision, completed as it goes
	echoes   map[string]int // secret name -> values replaced in answers
}

// next relays one request and its response; false ends the tunnel.
func (x *exchange) next() bool {
	g := x.g
	c := x.guest
	c.SetReadDeadline(time.Now().Add(g.limits.IdleTimeout))
	if _, err := x.gbr.Peek(1); err != nil {
		return false
	}
	c.SetReadDeadline(time.Now().Add(g.limits.HeaderTimeout))
	n, err := waitHead(x.gbr, g.limits.MaxHeaderBytes)
	if err != nil {
		x.refuse(ReasonHeaderTooLarge, http.StatusRequestHeaderFieldsTooLarge, "request head too large or not received in time: "+err.Error())
		return false
	}
	head, _ := x.gbr.Peek(n)
	hosts, herr := rawHosts(head)
	req, err := http.ReadRequest(x.gbr)
	c.SetReadDeadline(time.Time{})
	if err != nil || herr != nil {
		x.refuse(ReasonBadRequest, http.StatusBadRequest, fmt.Sprintf("malformed request: %v", errors.Join(err, herr)))
		return false
	}
	if len(hosts) != 1 {
		x.refuse(ReasonHostMismatch, http.StatusBadRequest, "a request needs exactly one Host header")
		return false
	}
	if err := hostAgrees(hosts[0], x.t, 0); err != nil {
		x.refuse(ReasonHostMismatch, http.StatusBadRequest, fmt.Sprintf("Host header %q disagrees with the tunnel's host %s: %v", hosts[0], x.t, err))
		return false
	}
	if req.URL.IsAbs() {
		x.refuse(ReasonBadRequest, http.StatusBadRequest, "absolute-URI request inside a tunnel")
		return false
	}
	set := g.tls.secrets.Load()
	used, sent, err := set.Apply(req, x.t, true)
	if err != nil {
		x.refuse(ReasonPlaceholder, http.StatusForbidden, err.Error())
		return false
	}
	var scan *intercept.ScanReader
	if req.Body != nil && req.Body != http.NoBody && set.Len() > 0 {
		scan = set.ScanBody(req.Body, x.t, true)
		req.Body = io.NopCloser(scan)
		req.Trailer = nil // trailers arrive after the scan: not passed on
	}
	keep := !req.Close
	if strings.EqualFold(req.Header.Get("Expect"), "100-continue") {
		io.WriteString(c, "HTTP/1.1 100 Continue\r\n\r\n")
	}
	req.Header.Del("Expect")
	removeHopHeaders(req.Header)
	if _, ok := req.Header["User-Agent"]; !ok {
		req.Header["User-Agent"] = []string{""}
	}
	red := set.Redactor(x.t, sent)
	if red != nil {
		// Answers are searched for values: ask for them unencoded.
		req.Header["Accept-Encoding"] = []string{"identity"}
	}
	req.Close = false
	nUp, err := writeRequest(x.up, req)
	x.d.BytesUp += nUp
	if scan != nil && scan.Refusal() != nil {
		x.refuse(ReasonPlaceholder, http.StatusForbidden, scan.Refusal().Error())
		return false
	}
	if err != nil {
		x.refuse(ReasonUpstreamError, http.StatusBadGateway, "write request: "+err.Error())
		return false
	}
	for _, n := range used {
		if !slices.Contains(x.d.Secrets, n) {
			x.d.Secrets = append(x.d.Secrets, n)
		}
	}
	x.up.SetReadDeadline(time.Now().Add(g.limits.ResponseTimeout))
	resp, err := readResponse(x.ubr, req, g.limits.MaxHeaderBytes)
	x.up.SetReadDeadline(time.Time{})
	if err != nil {
		x.refuse(ReasonUpstreamError, http.StatusBadGateway, "read response: "+err.Error())
		return false
	}
	defer resp.Body.Close()
	upstreamClose := resp.Close
	removeHopHeaders(resp.Header)
	if red != nil {
		if err := red.Response(resp); err != nil {
			x.refuse(ReasonUpstreamError, http.StatusBadGateway, err.Error())
			return false
		}
		defer func() {
			for n, c := range red.Hits() {
				x.echoes[n] += c
			}
		}()
	}
	resp.ProtoMajor, resp.ProtoMinor, resp.Proto = 1, 1, "HTTP/1.1"
	untilEOF := resp.ContentLength < 0 && !isChunked(resp.TransferEncoding) && resp.Body != http.NoBody
	keep = keep && !untilEOF && !upstreamClose
	resp.Close = !keep
	nDown, err := writeResponse(c, resp)
	x.d.BytesDown += nDown
	return err == nil && keep
}

// refuse answers the guest's request inside the tunnel and records the
// refusal as a decision of its own; the tunnel then ends.
func (x *exchange) refuse(r Reason, status int, detail string) {
	d := *x.d
	d.Time = x.g.now()
	d.Reason, d.Detail, d.BytesUp, d.BytesDown, d.Secrets = r, detail, 0, 0, nil
	x.g.record(d)
	x.d.Detail = "TLS inspected; ended: " + string(r)
	body := refusalText(d, x.g.service)
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\nX-Airlock-Decision: %s\r\nConnection: close\r\n\r\n%s",
		status, http.StatusText(status), len(body), decisionHeader(d), body)
	x.guest.SetWriteDeadline(time.Now().Add(x.g.limits.HeaderTimeout))
	io.WriteString(x.guest, b.String())
}

// httpTunnelReply is the CONNECT answer for intercept.
func httpTunnelReply(c net.Conn, service bool) tunnelReply {
	return func(d Decision, ok bool) error {
		if !ok {
			// httpConn.refuse records; intercept records too, so answer only.
			body := refusalText(d, service)
			status := statusFor(d.Reason)
			_, err := io.WriteString(c, "HTTP/1.1 "+strconv.Itoa(status)+" "+http.StatusText(status)+
				"\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: "+strconv.Itoa(len(body))+
				"\r\nX-Airlock-Decision: "+decisionHeader(d)+"\r\nConnection: close\r\n\r\n"+body)
			return err
		}
		_, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\nX-Airlock-Decision: "+decisionHeader(d)+"\r\n\r\n")
		return err
	}
}

// socksTunnelReply is the SOCKS answer for intercept.
func socksTunnelReply(c net.Conn) tunnelReply {
	return func(d Decision, ok bool) error {
		if !ok {
			return socksReply(c, socksReplyFor(d.Reason, nil))
		}
		return socksReply(c, repSucceeded)
	}
}
