package egress

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/app/egress/policy"
)

// SOCKS5 constants (RFC 1928, RFC 1929).
const (
	socksVersion     = 0x05
	socksAuthVersion = 0x01

	methodNoAuth   = 0x00
	methodUserPass = 0x02
	methodNone     = 0xff

	cmdConnect = 0x01

	atypIPv4   = 0x01
	atypDomain = 0x03
	atypIPv6   = 0x04
)

// SOCKS5 reply codes.
const (
	repSucceeded          = 0x00
	repGeneralFailure     = 0x01
	repNotAllowed         = 0x02
	repNetUnreachable     = 0x03
	repHostUnreachable    = 0x04
	repConnRefused        = 0x05
	repCmdNotSupported    = 0x07
	repAddrTypeNotSupport = 0x08
)

// socksError is a failed handshake: the reason to log and the reply to
// send (replied says the handshake already answered, as for auth).
type socksError struct {
	reason  Reason
	reply   byte
	replied bool
	msg     string
}

func (e *socksError) Error() string { return string(e.reason) + ": " + e.msg }

// socksRequest is a handshake's outcome.
type socksRequest struct {
	task   string
	host   string // as sent: a name, or the address text
	port   uint16
	target policy.Target
}

// authFunc maps a credential to a task; present is false when the client
// chose the no-authentication method.
type authFunc func(user, pass string, present bool) (task string, ok bool)

// socksHandshake runs the server side of a SOCKS5 handshake up to, not
// including, the final reply. It never reads more than the protocol allows
// (at most 255-byte fields), so arbitrary client bytes cost little. Errors
// are *socksError or the connection's read error.
func socksHandshake(rw io.ReadWriter, auth authFunc) (socksRequest, error) {
	var r socksRequest
	var hdr [2]byte
	if _, err := io.ReadFull(rw, hdr[:]); err != nil {
		return r, err
	}
	if hdr[0] != socksVersion {
		return r, &socksError{reason: ReasonBadRequest, replied: true, msg: fmt.Sprintf("not SOCKS5 (version byte %#x)", hdr[0])}
	}
	methods := make([]byte, hdr[1])
	if _, err := io.ReadFull(rw, methods); err != nil {
		return r, err
	}
	_, noAuthOK := auth("", "", false)
	method := byte(methodNone)
	for _, m := range methods {
		if m == methodUserPass {
			method = methodUserPass
			break
		}
		if m == methodNoAuth && noAuthOK {
			method = methodNoAuth
		}
	}
	if _, err := rw.Write([]byte{socksVersion, method}); err != nil {
		return r, err
	}
	switch method {
	case methodNone:
		return r, &socksError{reason: ReasonAuthFailed, replied: true, msg: "no acceptable authentication method"}
	case methodUserPass:
		user, pass, err := readUserPass(rw)
		if err != nil {
			return r, err
		}
		task, ok := auth(user, pass, true)
		status := byte(0)
		if !ok {
			status = 1
		}
		if _, err := rw.Write([]byte{socksAuthVersion, status}); err != nil {
			return r, err
		}
		if !ok {
			return r, &socksError{reason: ReasonAuthFailed, replied: true, msg: "unknown credential"}
		}
		r.task = task
	}

	var req [4]byte
	if _, err := io.ReadFull(rw, req[:]); err != nil {
		return r, err
	}
	if req[0] != socksVersion || req[2] != 0 {
		return r, &socksError{reason: ReasonBadRequest, reply: repGeneralFailure, msg: "malformed request"}
	}
	switch req[3] {
	case atypIPv4, atypIPv6:
		b := make([]byte, 4)
		if req[3] == atypIPv6 {
			b = make([]byte, 16)
		}
		if _, err := io.ReadFull(rw, b); err != nil {
			return r, err
		}
		r.host = net.IP(b).String()
	case atypDomain:
		var n [1]byte
		if _, err := io.ReadFull(rw, n[:]); err != nil {
			return r, err
		}
		b := make([]byte, n[0])
		if _, err := io.ReadFull(rw, b); err != nil {
			return r, err
		}
		r.host = string(b)
	default:
		return r, &socksError{reason: ReasonBadRequest, reply: repAddrTypeNotSupport, msg: fmt.Sprintf("address type %#x", req[3])}
	}
	var p [2]byte
	if _, err := io.ReadFull(rw, p[:]); err != nil {
		return r, err
	}
	r.port = binary.BigEndian.Uint16(p[:])
	if req[1] != cmdConnect {
		return r, &socksError{reason: ReasonUnsupported, reply: repCmdNotSupported, msg: fmt.Sprintf("command %#x (only CONNECT is supported)", req[1])}
	}
	t, err := policy.NewTarget(r.host, r.port)
	if err != nil {
		return r, &socksError{reason: ReasonBadRequest, reply: repGeneralFailure, msg: fmt.Sprintf("target %q: %v", r.host, err)}
	}
	r.target = t
	return r, nil
}

// readUserPass reads an RFC 1929 username/password request.
func readUserPass(rd io.Reader) (user, pass string, err error) {
	var b [2]byte
	if _, err := io.ReadFull(rd, b[:]); err != nil {
		return "", "", err
	}
	if b[0] != socksAuthVersion {
		return "", "", &socksError{reason: ReasonAuthFailed, replied: true, msg: "bad auth version"}
	}
	u := make([]byte, b[1])
	if _, err := io.ReadFull(rd, u); err != nil {
		return "", "", err
	}
	if _, err := io.ReadFull(rd, b[:1]); err != nil {
		return "", "", err
	}
	pw := make([]byte, b[0])
	if _, err := io.ReadFull(rd, pw); err != nil {
		return "", "", err
	}
	return string(u), string(pw), nil
}

// socksReply writes a reply; the bound address is always 0.0.0.0:0 so no
// host address leaks into the guest.
func socksReply(w io.Writer, rep byte) error {
	_, err := w.Write([]byte{socksVersion, rep, 0, atypIPv4, 0, 0, 0, 0, 0, 0})
	return err
}

// handleSOCKS serves one guest connection to the SOCKS5 proxy.
func (g *Gate) handleSOCKS(c net.Conn) {
	d := Decision{Time: g.now(), Protocol: ProtoSOCKS}
	c.SetDeadline(time.Now().Add(g.limits.HeaderTimeout))
	br := bufio.NewReader(c) // bytes a client sends ahead stay in br for the relay
	rw := struct {
		io.Reader
		io.Writer
	}{br, c}
	r, err := socksHandshake(rw, g.creds.authenticate)
	c.SetDeadline(time.Time{})
	d.Task, d.Host, d.Port = r.task, r.target.Host, r.port
	if d.Host == "" {
		d.Host = r.host
	}
	if err != nil {
		var se *socksError
		switch {
		case errors.As(err, &se):
		case isTimeout(err):
			se = &socksError{reason: ReasonTimeout, replied: true, msg: "handshake not completed in time"}
		default:
			se = &socksError{reason: ReasonBadRequest, replied: true, msg: err.Error()}
		}
		d.Reason, d.Detail = se.reason, se.msg
		if !se.replied {
			socksReply(c, se.reply)
		}
		g.record(d)
		return
	}
	pl := g.decide(g.ctx, r.task, ProtoSOCKS, r.target)
	d.Rule, d.Detail, d.Addr = pl.rule, pl.detail, addrText(pl.addr)
	if !pl.reason.allowed() {
		d.Reason = pl.reason
		socksReply(c, socksReplyFor(pl.reason, nil))
		g.record(d)
		return
	}
	if g.tls.intercepts(r.target) {
		g.intercept(c, br, r.target, pl, d, socksTunnelReply(c))
		return
	}
	uc, addr, err := g.dial(g.ctx, pl, r.port)
	d.Addr = addrText(addr)
	if err != nil {
		d.Reason, d.Detail = ReasonDialFailed, err.Error()
		socksReply(c, socksReplyFor(ReasonDialFailed, err))
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
	d.Reason = pl.reason
	if err := socksReply(c, repSucceeded); err != nil {
		d.Detail = "guest went away: " + err.Error()
		g.record(d)
		return
	}
	d.BytesUp, d.BytesDown = relay(c, br, uc)
	g.record(d)
}

// socksReplyFor maps a refusal to the SOCKS5 reply code.
func socksReplyFor(r Reason, dialErr error) byte {
	switch r {
	case ReasonResolveFailed:
		return repHostUnreachable
	case ReasonDialFailed:
		switch {
		case errors.Is(dialErr, syscall.ECONNREFUSED):
			return repConnRefused
		case errors.Is(dialErr, syscall.ENETUNREACH):
			return repNetUnreachable
		}
		return repHostUnreachable
	case ReasonBadRequest, ReasonShutdown:
		return repGeneralFailure
	case ReasonUnsupported:
		return repCmdNotSupported
	}
	return repNotAllowed
}
