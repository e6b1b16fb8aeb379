package egress

import (
	"net"
	"net/url"
	"strings"

	"github.com/airlock-sandbox/airlock/guest/api"
)

// Guest addresses of the in-VM proxies that forward to the gate (see
// guest/egress); every task's proxy variables point there.
const (
	GuestHTTPProxy  = "127.0.0.1:3128"
	GuestSOCKSProxy = "127.0.0.1:1080"
)

// NoProxy is what tasks must reach directly: the guest's own loopback.
const NoProxy = "localhost,127.0.0.1,::1"

// ProxyEnv returns the environment a task needs so its tools send every
// connection through the gate with the task's credential: HTTP_PROXY,
// HTTPS_PROXY, ALL_PROXY (socks5h, so names are resolved by the gate: the
// guest has no resolver) and NO_PROXY, each in both cases.
func ProxyEnv(user, pass string) []string {
	creds := url.UserPassword(user, pass)
	httpURL := (&url.URL{Scheme: "http", User: creds, Host: GuestHTTPProxy}).String()
	socksURL := (&url.URL{Scheme: "socks5h", User: creds, Host: GuestSOCKSProxy}).String()
	var env []string
	for _, kv := range [][2]string{
		{"HTTP_PROXY", httpURL}, {"HTTPS_PROXY", httpURL}, {"ALL_PROXY", socksURL}, {"NO_PROXY", NoProxy},
	} {
		env = append(env, kv[0]+"="+kv[1], strings.ToLower(kv[0])+"="+kv[1])
	}
	return env
}

// Where the guest keeps the installation CA: its own file, and appended to
// the system bundle every TLS library of the image reads (the agent's
// TrustCA call writes both).
const (
	GuestCAFile   = api.CAFile
	GuestCABundle = api.CABundle
)

// TrustEnv returns the variables that point a task's tools at the bundle
// holding the installation CA: SSL_CERT_FILE (Go, OpenSSL), REQUESTS_CA_BUNDLE
// (Python requests), CURL_CA_BUNDLE, GIT_SSL_CAINFO, and NODE_EXTRA_CA_CERTS
// (Node adds it to its own roots).
func TrustEnv() []string {
	return []string{
		"SSL_CERT_FILE=" + GuestCABundle,
		"REQUESTS_CA_BUNDLE=" + GuestCABundle,
		"CURL_CA_BUNDLE=" + GuestCABundle,
		"GIT_SSL_CAINFO=" + GuestCABundle,
		"NODE_EXTRA_CA_CERTS=" + GuestCAFile,
	}
}

// Server is what a sandbox needs from the gate: serving the two proxy
// protocols on the transport's listeners.
type Server interface {
	ServeHTTPProxy(l net.Listener) error
	ServeSOCKS(l net.Listener) error
}

var _ Server = (*Gate)(nil)
