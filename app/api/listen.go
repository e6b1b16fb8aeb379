package api

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
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

// RequireToken lets a request through only with the token: as
// "Authorization: Bearer TOKEN", or as ?token=TOKEN once (which sets an
// HttpOnly, SameSite=Strict cookie for the browser UI's later requests).
// Requests whose Host is not a loopback name are refused (DNS rebinding).
func RequireToken(token string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !loopbackHost(r.Host) {
			http.Error(w, "forbidden host", http.StatusForbidden)
			return
		}
		got := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		if c, err := r.Cookie("airlock_token"); got == "" && err == nil {
			got = c.Value
		}
		if q := r.URL.Query().Get("token"); got == "" && q != "" {
			got = q
			if subtle.ConstantTimeCompare([]byte(q), []byte(token)) == 1 {
				http.SetCookie(w, &http.Cookie{Name: "airlock_token", Value: token, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
			}
		}
		if subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
			writeJSON(w, http.StatusUnauthorized, apiError{Error: "a valid token is needed (see the URL airlock serve printed)", Code: "unauthorized"})
			return
		}
		next.ServeHTTP(w, r)
	})
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
