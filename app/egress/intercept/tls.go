package intercept

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/airlock-sandbox/airlock/app/egress/policy"
)

// UpstreamRoots returns the roots the gate verifies real servers with: the
// system's, plus the PEM certificates in files (a corporate CA, a private
// CA). A file without a certificate is an error naming it. Without files it
// returns nil, which means the system's roots to crypto/tls, loaded on the
// first verification: an `airlock run` that verifies no server, as most do,
// never pays for reading them (docs/performance.md, Figures behind the code).
func UpstreamRoots(files []string) (*x509.CertPool, error) {
	if len(files) == 0 {
		return nil, nil
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("upstream CA: %w", err)
		}
		if !pool.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("upstream CA %s: no PEM certificate in it", f)
		}
	}
	return pool, nil
}

// Upstream runs TLS with the real server of host over c, verifying its
// certificate against roots (nil: the system's) before the guest gets its
// tunnel. Only HTTP/1.1 is offered: the gate reads the requests it relays.
func Upstream(ctx context.Context, c net.Conn, host string, roots *x509.CertPool) (*tls.Conn, error) {
	up := tls.Client(c, &tls.Config{
		ServerName: host, RootCAs: roots, NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12,
	})
	if err := up.HandshakeContext(ctx); err != nil {
		return nil, err
	}
	return up, nil
}

// ServerNameError is the guest's TLS naming another server than the
// tunnel's host.
type ServerNameError struct {
	// Name is the server name the guest sent.
	Name string
	// Host is the tunnel's host.
	Host string
}

func (e *ServerNameError) Error() string {
	return fmt.Sprintf("TLS server name %q differs from the tunnel's host %s", e.Name, e.Host)
}

// Accept terminates the guest's TLS on c for host (a normalised name or
// address text) with a leaf certificate of the CA, within timeout. A
// ClientHello naming another server fails with a *ServerNameError; a guest
// that does not trust the CA fails the handshake.
func (ca *CA) Accept(c net.Conn, host string, timeout time.Duration) (*tls.Conn, error) {
	var sniErr error
	gc := tls.Server(c, &tls.Config{
		NextProtos: []string{"http/1.1"},
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
			if h.ServerName != "" {
				if n, err := policy.NormalizeHost(h.ServerName); err != nil || n != host {
					sniErr = &ServerNameError{Name: h.ServerName, Host: host}
					return nil, sniErr
				}
			}
			return ca.leaf(host)
		},
	})
	c.SetDeadline(time.Now().Add(timeout))
	err := gc.Handshake()
	c.SetDeadline(time.Time{})
	if sniErr != nil {
		return nil, sniErr
	}
	if err != nil {
		return nil, err
	}
	return gc, nil
}
