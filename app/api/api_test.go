//go:build !windows

package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/app/changes"
	"github.com/airlock-sandbox/airlock/app/secrets"
	"github.com/airlock-sandbox/airlock/app/service"
	"github.com/airlock-sandbox/airlock/app/settings"
	"github.com/airlock-sandbox/airlock/app/tasks"
	"github.com/airlock-sandbox/airlock/app/workspace"
)

// fakeCore answers a few calls; the embedded nil interface panics on the
// rest, which the tests do not use.
type fakeCore struct {
	service.Core
	runs  []service.RunRequest
	rules []string
}

func (f *fakeCore) EgressRule(_ context.Context, action, pattern string) (settings.Settings, error) {
	f.rules = append(f.rules, action+" "+pattern)
	return settings.Settings{Allow: []string{pattern}}, nil
}

func (f *fakeCore) Status(context.Context) (service.Status, error) {
	return service.Status{RunningTasks: 2, StateDir: "/state"}, nil
}

func (f *fakeCore) Run(_ context.Context, req service.RunRequest) (tasks.Task, error) {
	if len(req.Argv) == 0 && req.Shell == "" {
		return tasks.Task{}, errors.New("exactly one of argv and shell is needed")
	}
	f.runs = append(f.runs, req)
	return tasks.Task{ID: "t1", State: tasks.Queued}, nil
}

func (f *fakeCore) Task(_ context.Context, id string) (tasks.Task, error) {
	if id != "t1" {
		return tasks.Task{}, fmt.Errorf("task %s: %w", id, tasks.ErrNotFound)
	}
	return tasks.Task{ID: "t1", State: tasks.Exited}, nil
}

func (f *fakeCore) SetImage(context.Context, string, bool) error { return nil }
func (f *fakeCore) SetMachine(context.Context, int, int) error   { return nil }
func (f *fakeCore) ResetDisk(context.Context) error              { return nil }

func (f *fakeCore) SetWorkspace(_ context.Context, dir string, _ bool, _ changes.Mode) error {
	return fmt.Errorf("%w: %s is your home folder", workspace.ErrRefused, dir)
}

func (f *fakeCore) FollowLogs(ctx context.Context, id string, offset int64) (<-chan tasks.Chunk, error) {
	ch := make(chan tasks.Chunk, 3)
	ch <- tasks.Chunk{Offset: offset, Stream: tasks.Stdout, Data: []byte("one\n")}
	ch <- tasks.Chunk{Offset: offset + 12, Stream: tasks.Stderr, Data: []byte("two\n")}
	close(ch)
	return ch, nil
}

func TestClientServerRoundTrip(t *testing.T) {
	core := &fakeCore{}
	sock := filepath.Join(t.TempDir(), "run", "airlock.sock")
	l, err := ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go Serve(ctx, l, Handler(core, nil), nil)
	c := NewUnixClient(sock)

	if st, err := c.Status(ctx); err != nil || st.RunningTasks != 2 {
		t.Fatalf("status %+v %v", st, err)
	}
	if _, err := c.Run(ctx, service.RunRequest{Argv: []string{"true"}, Stdin: []byte{0, 1, 2}}); err != nil {
		t.Fatal(err)
	}
	if got := core.runs[0]; string(got.Stdin) != "\x00\x01\x02" || got.Argv[0] != "true" {
		t.Fatalf("run arrived as %+v", got)
	}
	if _, err := c.Run(ctx, service.RunRequest{}); !errors.Is(err, errInvalid) || !strings.Contains(err.Error(), "exactly one") {
		t.Fatalf("bad run: %v", err)
	}
	if _, err := c.Task(ctx, "nope"); !errors.Is(err, tasks.ErrNotFound) {
		t.Fatalf("missing task: %v", err)
	}
	if err := c.SetWorkspace(ctx, "/home/x", false, ""); !errors.Is(err, workspace.ErrRefused) || !strings.Contains(err.Error(), "home folder") {
		t.Fatalf("refused workspace: %v", err)
	}
	ch, err := c.FollowLogs(ctx, "t1", 100)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for c := range ch {
		got = append(got, fmt.Sprintf("%d %s %q", c.Offset, c.Stream, c.Data))
	}
	if len(got) != 2 || !strings.HasPrefix(got[0], "100 ") || !strings.Contains(got[1], `"two\n"`) {
		t.Fatalf("follow: %v", got)
	}

	// The socket is private and a second service is refused.
	fi, _ := os.Stat(sock)
	di, _ := os.Stat(filepath.Dir(sock))
	if fi.Mode().Perm() != 0o600 || di.Mode().Perm() != 0o700 {
		t.Fatalf("socket %v, folder %v", fi.Mode(), di.Mode())
	}
	if _, err := ListenUnix(sock); !errors.Is(err, ErrRunning) {
		t.Fatalf("second listener: %v", err)
	}
}

func TestStaleSocketReplaced(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "airlock.sock")
	l, err := ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	// A crashed service leaves its socket file behind.
	l.(*peerListener).Listener.(interface{ SetUnlinkOnClose(bool) }).SetUnlinkOnClose(false)
	l.Close()
	if _, err := os.Stat(sock); err != nil {
		t.Fatalf("no stale socket to test with: %v", err)
	}
	l, err = ListenUnix(sock)
	if err != nil {
		t.Fatalf("stale socket not replaced: %v", err)
	}
	l.Close()
	if _, err := NewUnixClient(filepath.Join(t.TempDir(), "none.sock")).Status(context.Background()); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("no service: %v", err)
	}
}

func TestRequireToken(t *testing.T) {
	h := RequireToken("127.0.0.1:9", "secret", Handler(&fakeCore{}, nil))
	tests := []struct {
		name, host, auth, query string
		want                    int
	}{
		{"no token", "127.0.0.1:9", "", "", http.StatusUnauthorized},
		{"wrong token", "127.0.0.1:9", "Bearer nope", "", http.StatusUnauthorized},
		{"bearer", "127.0.0.1:9", "Bearer secret", "", http.StatusOK},
		{"query", "localhost:9", "", "?token=secret", http.StatusOK},
		{"foreign host (DNS rebinding)", "evil.example:9", "Bearer secret", "", http.StatusForbidden},
		{"foreign host without a port", "evil.example", "Bearer secret", "", http.StatusForbidden},
		{"another loopback port", "127.0.0.1:10", "Bearer secret", "", http.StatusForbidden},
		{"another loopback address", "127.0.0.2:9", "Bearer secret", "", http.StatusForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "http://"+tt.host+"/v1/status"+tt.query, nil)
			if tt.auth != "" {
				r.Header.Set("Authorization", tt.auth)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tt.want {
				t.Fatalf("%s: %d, want %d", tt.name, w.Code, tt.want)
			}
			if tt.query != "" && !strings.Contains(w.Header().Get("Set-Cookie"), "HttpOnly") {
				t.Fatalf("no session cookie: %q", w.Header().Get("Set-Cookie"))
			}
			if w.Header().Get("X-Frame-Options") != "DENY" {
				t.Fatalf("the answer may be framed: %v", w.Header())
			}
		})
	}
}

// TestCookieOnlyFromTheUI: a page on another loopback port is same-site
// for the UI's cookie, so the browser sends it with that page's form posts
// and fetches; the cookie then must not be enough.
func TestCookieOnlyFromTheUI(t *testing.T) {
	const ui = "http://127.0.0.1:9"
	const rule = `{"action":"allow","pattern":"evil.test"}`
	// A form with enctype text/plain sends NAME=VALUE: a JSON object as
	// the name, and the decoder stops at its end.
	const formRule = rule + "=\r\n"
	type hdr = map[string]string
	tests := []struct {
		name, method, path, body string
		headers                  hdr
		want                     int
	}{
		// The UI itself, and a person opening the address.
		{"UI: fetch JSON", "POST", "/v1/tasks", `{"shell":"id"}`, hdr{"Sec-Fetch-Site": "same-origin", "Origin": ui, "Content-Type": "application/json"}, http.StatusCreated},
		{"UI: fetch JSON with a charset", "POST", "/v1/tasks", `{"shell":"id"}`, hdr{"Sec-Fetch-Site": "same-origin", "Content-Type": "application/json; charset=utf-8"}, http.StatusCreated},
		{"UI: Origin only (no Fetch Metadata)", "POST", "/v1/tasks", `{"shell":"id"}`, hdr{"Origin": ui, "Content-Type": "application/json"}, http.StatusCreated},
		{"UI: a POST without a body", "POST", "/v1/disk/reset", "", hdr{"Sec-Fetch-Site": "same-origin", "Origin": ui}, http.StatusOK},
		{"UI: GET", "GET", "/v1/status", "", hdr{"Sec-Fetch-Site": "same-origin"}, http.StatusOK},
		{"typed address", "GET", "/v1/status", "", hdr{"Sec-Fetch-Site": "none"}, http.StatusOK},
		{"GET without Fetch Metadata (an older browser)", "GET", "/v1/status", "", nil, http.StatusOK},

		// Another page on loopback.
		{"form post, text/plain", "POST", "/v1/egress/rules", formRule, hdr{"Sec-Fetch-Site": "same-site", "Origin": "http://127.0.0.1:8000", "Content-Type": "text/plain"}, http.StatusForbidden},
		{"UI: add a rule", "POST", "/v1/egress/rules", rule, hdr{"Sec-Fetch-Site": "same-origin", "Origin": ui, "Content-Type": "application/json"}, http.StatusOK},
		{"form post, urlencoded", "POST", "/v1/tasks", "shell=id", hdr{"Sec-Fetch-Site": "same-site", "Origin": "http://127.0.0.1:8000", "Content-Type": "application/x-www-form-urlencoded"}, http.StatusForbidden},
		{"no-cors fetch from localhost", "POST", "/v1/tasks", `{"shell":"id","root":true}`, hdr{"Sec-Fetch-Site": "same-site", "Origin": "http://localhost:5173", "Content-Type": "text/plain;charset=UTF-8"}, http.StatusForbidden},
		{"cross-site", "POST", "/v1/tasks", `{"shell":"id"}`, hdr{"Sec-Fetch-Site": "cross-site", "Origin": "https://evil.example", "Content-Type": "application/json"}, http.StatusForbidden},
		{"foreign Origin, no Fetch Metadata", "POST", "/v1/tasks", `{"shell":"id"}`, hdr{"Origin": "http://127.0.0.1:8000", "Content-Type": "application/json"}, http.StatusForbidden},
		{"opaque Origin (sandboxed frame, file:)", "POST", "/v1/tasks", `{"shell":"id"}`, hdr{"Origin": "null", "Content-Type": "application/json"}, http.StatusForbidden},
		{"same-origin claim with a foreign Origin", "POST", "/v1/tasks", `{"shell":"id"}`, hdr{"Sec-Fetch-Site": "same-origin", "Origin": "http://127.0.0.1:8000", "Content-Type": "application/json"}, http.StatusForbidden},
		{"neither header", "POST", "/v1/tasks", `{"shell":"id"}`, hdr{"Content-Type": "application/json"}, http.StatusForbidden},
		{"same origin, text/plain body", "POST", "/v1/egress/rules", rule, hdr{"Sec-Fetch-Site": "same-origin", "Content-Type": "text/plain"}, http.StatusForbidden},
		{"same origin, body without a type", "POST", "/v1/egress/rules", rule, hdr{"Sec-Fetch-Site": "same-origin"}, http.StatusForbidden},
		{"same-site GET", "GET", "/v1/status", "", hdr{"Sec-Fetch-Site": "same-site"}, http.StatusForbidden},
		{"cross-site navigation", "GET", "/", "", hdr{"Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
		{"a POST that claims to be typed", "POST", "/v1/disk/reset", "", hdr{"Sec-Fetch-Site": "none"}, http.StatusForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			core := &fakeCore{}
			h := RequireToken("127.0.0.1:9", "secret", Handler(core, nil))
			r := httptest.NewRequest(tt.method, ui+tt.path, strings.NewReader(tt.body))
			r.AddCookie(&http.Cookie{Name: "airlock_token", Value: "secret"})
			for k, v := range tt.headers {
				r.Header.Set(k, v)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tt.want {
				t.Fatalf("%d, want %d: %s", w.Code, tt.want, w.Body)
			}
			if tt.want == http.StatusForbidden && len(core.runs)+len(core.rules) != 0 {
				t.Fatalf("refused, but the core was called: %+v %q", core.runs, core.rules)
			}
		})
	}
	// The same foreign requests with the token in the header (the CLI,
	// scripts) pass: a page cannot set that header on another origin
	// without a CORS preflight, which this server never grants.
	t.Run("bearer from anywhere", func(t *testing.T) {
		core := &fakeCore{}
		h := RequireToken("127.0.0.1:9", "secret", Handler(core, nil))
		r := httptest.NewRequest("POST", ui+"/v1/tasks", strings.NewReader(`{"shell":"id"}`))
		r.Header.Set("Authorization", "Bearer secret")
		r.Header.Set("Sec-Fetch-Site", "cross-site")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusCreated || len(core.runs) != 1 {
			t.Fatalf("%d %s", w.Code, w.Body)
		}
	})
	// An Authorization header is the credential even when it is wrong:
	// the cookie does not stand in for it.
	t.Run("empty bearer with a good cookie", func(t *testing.T) {
		h := RequireToken("127.0.0.1:9", "secret", Handler(&fakeCore{}, nil))
		r := httptest.NewRequest("GET", ui+"/v1/status", nil)
		r.Header.Set("Authorization", "Bearer ")
		r.AddCookie(&http.Cookie{Name: "airlock_token", Value: "secret"})
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusUnauthorized {
			t.Fatalf("%d %s", w.Code, w.Body)
		}
	})
}

// secretCore keeps secrets the way the service does: the value goes in,
// only metadata comes out.
type secretCore struct {
	fakeCore
	values map[string]string
	list   []service.SecretInfo
}

func (f *secretCore) SetSecret(_ context.Context, req service.SecretRequest) (service.SecretInfo, error) {
	if len(req.Hosts) == 0 {
		return service.SecretInfo{}, fmt.Errorf("%w: no host", secrets.ErrInvalid)
	}
	f.values[req.Name] = req.Value
	info := service.SecretInfo{Secret: settings.Secret{Name: req.Name, Hosts: req.Hosts, Source: "keychain"}, Available: true}
	f.list = append(f.list, info)
	return info, nil
}

func (f *secretCore) Secrets(context.Context) ([]service.SecretInfo, error) { return f.list, nil }

func (f *secretCore) RemoveSecret(_ context.Context, name string) error {
	if _, ok := f.values[name]; !ok {
		return fmt.Errorf("%w: no secret named %q", secrets.ErrInvalid, name)
	}
	delete(f.values, name)
	f.list = nil
	return nil
}

func TestSecretEndpointsNeverAnswerWithTheValue(t *testing.T) {
	core := &secretCore{values: map[string]string{}}
	srv := httptest.NewServer(Handler(core, nil))
	defer srv.Close()
	c := NewHTTPClient(srv.URL, "")
	ctx := context.Background()
	const value = "value-that-stays-put"
	info, err := c.SetSecret(ctx, service.SecretRequest{Name: "TOK", Hosts: []string{"a.com"}, Value: value})
	if err != nil || info.Name != "TOK" || core.values["TOK"] != value {
		t.Fatalf("set: %+v %v", info, err)
	}
	if _, err := c.SetSecret(ctx, service.SecretRequest{Name: "X", Value: value}); !errors.Is(err, errInvalid) {
		t.Fatalf("invalid secret: %v", err)
	}
	for _, path := range []string{"/v1/secrets"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(b), value) {
			t.Fatalf("%s answers with the value: %s", path, b)
		}
	}
	// The name in the path and the body must agree.
	req, _ := http.NewRequest("PUT", srv.URL+"/v1/secrets/OTHER", strings.NewReader(`{"name":"TOK","hosts":["a.com"],"value":"x"}`))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 400 {
		t.Fatalf("mismatched name: %v %v", resp, err)
	}
	if err := c.RemoveSecret(ctx, "TOK"); err != nil {
		t.Fatal(err)
	}
	if err := c.RemoveSecret(ctx, "TOK"); !errors.Is(err, errInvalid) {
		t.Fatalf("second remove: %v", err)
	}
}
