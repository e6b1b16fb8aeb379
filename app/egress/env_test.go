package egress

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

func TestProxyEnv(t *testing.T) {
	env := ProxyEnv("t1", "p@ss/word")
	got := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		got[k] = v
	}
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"} {
		if got[k] == "" || got[k] != got[strings.ToLower(k)] {
			t.Errorf("%s = %q, lower case %q", k, got[k], got[strings.ToLower(k)])
		}
	}
	u, err := url.Parse(got["HTTPS_PROXY"])
	if err != nil || u.Host != GuestHTTPProxy || u.User.Username() != "t1" {
		t.Fatalf("HTTPS_PROXY %q: %v", got["HTTPS_PROXY"], err)
	}
	if p, _ := u.User.Password(); p != "p@ss/word" {
		t.Fatalf("password did not survive the URL: %q", p)
	}
	if !strings.HasPrefix(got["ALL_PROXY"], "socks5h://") {
		t.Fatalf("ALL_PROXY %q must make the gate resolve names", got["ALL_PROXY"])
	}
	// Go's own proxy selection (what the e2e probe uses) reads these.
	req, _ := http.NewRequest("GET", "https://example.com/", nil)
	t.Setenv("HTTPS_PROXY", got["HTTPS_PROXY"])
	if pu, err := http.ProxyFromEnvironment(req); err != nil || pu == nil || pu.Host != GuestHTTPProxy {
		t.Fatalf("ProxyFromEnvironment = %v, %v", pu, err)
	}
}
