package api

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"strings"
	"time"
)

// ErrRunning means another Airlock service already answers on the socket.
var ErrRunning = errors.New("an Airlock service is already running")

// Listen listens on the control endpoint at path: a unix socket (0600 in a
// private 0700 folder, peer uid checked), or on Windows a named pipe whose
// ACL admits only this user and SYSTEM (network logons denied).
func Listen(path string) (net.Listener, error) { return listenControl(path) }

// ListenUnix is Listen (kept for callers written before Windows pipes).
func ListenUnix(path string) (net.Listener, error) { return Listen(path) }

// Serve answers the API on l until ctx is done. On the unix socket only
// this user's processes are served (the peer's uid is checked as well as
// the file modes).
func Serve(ctx context.Context, l net.Listener, h http.Handler, log *slog.Logger) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	if log != nil {
		srv.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelWarn)
	}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		_ = srv.Close()
	}()
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// NewToken returns a random token for the loopback HTTP listener.
func NewToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// RequireToken lets a request to the loopback listener at addr through
// only with the token: as "Authorization: Bearer TOKEN" (the CLI, scripts),
// or as ?token=TOKEN once, which sets an HttpOnly, SameSite=Strict cookie
// for the browser UI's later requests.
//
// The cookie alone does not prove the request comes from the UI: every
// page on any other loopback port is same-site for it, so the browser
// sends it with that page's forms and fetches. When the token came from
// the cookie or the query, the request must also come from the UI's own
// origin (Sec-Fetch-Site same-origin, or a matching Origin), and a body
// must be JSON, which a cross-origin page cannot send without a CORS
// preflight this server never grants. A Host other than the listener's
// own address is refused whatever the credential (DNS rebinding).
func RequireToken(addr, token string, next http.Handler) http.Handler {
	hosts := ownHosts(addr)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The UI is never framed by another page (clickjacking), nor
		// read by one through a no-cors load.
		w.Header().Set("X-Frame-Options", "DENY")
		w.Header().Set("Cross-Origin-Resource-Policy", "same-origin")
		if !hosts[strings.ToLower(r.Host)] {
			writeJSON(w, http.StatusForbidden, apiError{Error: fmt.Sprintf("Host %q is not this listener's address: open http://%s/ (the URL airlock serve printed)", r.Host, addr), Code: "forbidden"})
			return
		}
		// A request with an Authorization header is judged by it alone.
		got, fromHeader := "", r.Header.Get("Authorization") != ""
		if fromHeader {
			got = strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		} else if c, err := r.Cookie("airlock_token"); err == nil {
			got = c.Value
		}
		if q := r.URL.Query().Get("token"); got == "" && !fromHeader && q != "" {
			got = q
			if subtle.ConstantTimeCompare([]byte(q), []byte(token)) == 1 {
				http.SetCookie(w, &http.Cookie{Name: "airlock_token", Value: token, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
			}
		}
		if subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
			writeJSON(w, http.StatusUnauthorized, apiError{Error: "a valid token is needed (see the URL airlock serve printed)", Code: "unauthorized"})
			return
		}
		if !fromHeader {
			if why := notFromUI(r); why != "" {
				writeJSON(w, http.StatusForbidden, apiError{Error: why + ": only Airlock's own page may use its cookie; scripts send the token as Authorization: Bearer TOKEN", Code: "forbidden"})
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// ownHosts are the Host headers the listener at addr answers to: its
// address, and localhost with its port when it listens on loopback.
func ownHosts(addr string) map[string]bool {
	hosts := map[string]bool{strings.ToLower(addr): true}
	if _, port, err := net.SplitHostPort(addr); err == nil && loopbackHost(addr) {
		hosts["localhost:"+port] = true
	}
	return hosts
}

// notFromUI says why a request that carries the token in a cookie (or the
// query) may come from a page other than the UI, or "" when it cannot.
// r.Host is already known to be the listener's.
func notFromUI(r *http.Request) string {
	safe := r.Method == http.MethodGet || r.Method == http.MethodHead
	site := r.Header.Get("Sec-Fetch-Site")
	switch {
	case site == "same-origin":
	case site == "none" && safe:
		// The user typed the address or opened a bookmark.
	case site != "":
		return "request from another site (Sec-Fetch-Site: " + site + ")"
	}
	origin := r.Header.Get("Origin")
	switch {
	case origin != "" && !strings.EqualFold(origin, "http://"+r.Host):
		return "request from another origin (" + origin + ")"
	case site == "" && origin == "" && !safe:
		// Browsers send at least one of the two with every POST, PUT
		// and DELETE; without either, nothing shows where it came from.
		return "request without Sec-Fetch-Site or Origin"
	}
	if !safe && (r.ContentLength != 0 || r.Header.Get("Content-Type") != "") {
		if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
			return "a body that is not Content-Type: application/json"
		}
	}
	return ""
}

// ListenLoopback listens on addr (HOST:PORT) for the token-guarded HTTP
// door, refusing anything but a loopback address or localhost: the token
// is the only guard there, so that door is never on a network.
func ListenLoopback(addr string) (net.Listener, error) {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, err
	}
	if !loopbackHost(addr) {
		return nil, fmt.Errorf("%s: only a loopback address (127.0.0.1:PORT) is allowed", addr)
	}
	return net.Listen("tcp", addr)
}

func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}
