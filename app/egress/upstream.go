package egress

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"time"
)

// ParseUpstreamProxy checks an upstream proxy URL: http://[user:pass@]host:port.
func ParseUpstreamProxy(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("upstream proxy %q: %w", s, err)
	}
	if u.Scheme != "http" || u.Hostname() == "" || u.Port() == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return nil, fmt.Errorf("upstream proxy %q: expected http://[user:pass@]host:port", s)
	}
	return u, nil
}

// proxyDialer reaches upstreams through an HTTP proxy with CONNECT. It is
// given the address the gate checked, so the proxy connects exactly there.
type proxyDialer struct {
	base     Dialer
	addr     string // the proxy's host:port
	auth     string // Proxy-Authorization value, or ""
	maxBytes int
}

func newProxyDialer(s string, base Dialer, maxBytes int) (*proxyDialer, error) {
	u, err := ParseUpstreamProxy(s)
	if err != nil {
		return nil, fmt.Errorf("egress: %w", err)
	}
	p := &proxyDialer{base: base, addr: u.Host, maxBytes: maxBytes}
	if u.User != nil {
		pass, _ := u.User.Password()
		p.auth = "Basic " + base64.StdEncoding.EncodeToString([]byte(u.User.Username()+":"+pass))
	}
	return p, nil
}

// DialContext opens a tunnel to address through the proxy.
func (p *proxyDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	c, err := p.base.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return nil, fmt.Errorf("upstream proxy %s: %w", p.addr, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	} else {
		c.SetDeadline(time.Now().Add(DefaultDialTimeout))
	}
	req := "CONNECT " + address + " HTTP/1.1\r\nHost: " + address + "\r\n"
	if p.auth != "" {
		req += "Proxy-Authorization: " + p.auth + "\r\n"
	}
	if _, err := c.Write([]byte(req + "\r\n")); err != nil {
		c.Close()
		return nil, fmt.Errorf("upstream proxy %s: %w", p.addr, err)
	}
	br := bufio.NewReaderSize(c, p.maxBytes)
	if _, err := waitHead(br, p.maxBytes); err != nil {
		c.Close()
		return nil, fmt.Errorf("upstream proxy %s: reading its answer: %w", p.addr, err)
	}
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("upstream proxy %s: %w", p.addr, err)
	}
	if resp.StatusCode != http.StatusOK {
		c.Close()
		return nil, fmt.Errorf("upstream proxy %s refused CONNECT %s: %s", p.addr, address, resp.Status)
	}
	c.SetDeadline(time.Time{})
	if br.Buffered() > 0 {
		return prefixConn{c, br}, nil
	}
	return c, nil
}

var errNoCloseWrite = errors.New("no half-close")

// CloseWrite half-closes the tunnel when the underlying connection can.
func (p prefixConn) CloseWrite() error {
	if cw, ok := p.Conn.(closeWriter); ok {
		return cw.CloseWrite()
	}
	return errNoCloseWrite
}
