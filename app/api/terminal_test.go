//go:build !windows

package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/app/service"
	"github.com/airlock-sandbox/airlock/app/tasks"
	"github.com/gorilla/websocket"
)

// termCore plays a terminal whose shell echoes its input and reports
// resizes; "exit" ends it.
type termCore struct {
	fakeCore
	mu     sync.Mutex
	out    chan []byte
	sizes  []string
	closed bool
}

func (c *termCore) OpenTerminal(_ context.Context, req service.TerminalRequest) (tasks.Task, error) {
	return tasks.Task{ID: "term1", State: tasks.Queued, Command: tasks.Command{Shell: service.TerminalShell, TTY: true}}, nil
}

func (c *termCore) AttachTerminal(_ context.Context, id string) (service.TerminalConn, error) {
	if id != "term1" {
		return nil, service.ErrNotTerminal
	}
	return &echoConn{c: c}, nil
}

func (c *termCore) CloseTerminal(_ context.Context, id string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	return nil
}

// ReadTerminal answers "screen" for the recent screen and waits for ctx
// at any other offset.
func (c *termCore) ReadTerminal(ctx context.Context, id string, offset int64) (service.TerminalOutput, error) {
	if id != "term1" {
		return service.TerminalOutput{}, service.ErrNotTerminal
	}
	if offset < 0 {
		return service.TerminalOutput{Data: []byte("screen\x1b[0m"), Offset: 100, Next: 110}, nil
	}
	<-ctx.Done()
	return service.TerminalOutput{Offset: offset, Next: offset}, nil
}

func (c *termCore) TerminalInput(_ context.Context, id string, data []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sizes = append(c.sizes, "input:"+string(data))
	return nil
}

func (c *termCore) ResizeTerminal(_ context.Context, id string, rows, cols uint16) error {
	if rows > service.MaxTerminalDim {
		return errors.New("too big")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sizes = append(c.sizes, fmt.Sprintf("%dx%d", rows, cols))
	return nil
}

type echoConn struct{ c *termCore }

func (e *echoConn) Next(ctx context.Context) ([]byte, error) {
	select {
	case p, ok := <-e.c.out:
		if !ok {
			return nil, io.EOF
		}
		return p, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (e *echoConn) Write(p []byte) (int, error) {
	if string(p) == "exit" {
		close(e.c.out)
		return len(p), nil
	}
	e.c.out <- append([]byte("echo:"), p...)
	return len(p), nil
}

func (e *echoConn) Resize(rows, cols uint16) error {
	e.c.mu.Lock()
	e.c.sizes = append(e.c.sizes, fmt.Sprintf("%dx%d", rows, cols))
	e.c.mu.Unlock()
	e.c.out <- []byte("resized")
	return nil
}

func (e *echoConn) Close() {}

func TestTerminalWebSocket(t *testing.T) {
	core := &termCore{out: make(chan []byte, 16)}
	token := NewToken()
	srv := httptest.NewUnstartedServer(nil)
	srv.Config.Handler = RequireToken(srv.Listener.Addr().String(), token, Handler(core, nil))
	srv.Start()
	defer srv.Close()
	host := srv.Listener.Addr().String()
	wsURL := "ws://" + host + "/v1/terminals/term1/attach"
	cookie := http.Header{"Cookie": {"airlock_token=" + token}}

	// The UI's own page, with the cookie, may attach; another page on
	// another loopback port, which the browser would send the cookie for
	// too, may not; nor may anyone without the token.
	refused := []struct {
		name string
		hdr  http.Header
		want int
	}{
		{"no token", http.Header{"Origin": {"http://" + host}}, http.StatusUnauthorized},
		{"another loopback origin", http.Header{"Cookie": cookie["Cookie"], "Origin": {"http://127.0.0.1:1"}}, http.StatusForbidden},
		{"another site", http.Header{"Cookie": cookie["Cookie"], "Origin": {"http://" + host}, "Sec-Fetch-Site": {"cross-site"}}, http.StatusForbidden},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			_, resp, err := websocket.DefaultDialer.Dial(wsURL, tc.hdr)
			if err == nil || resp == nil || resp.StatusCode != tc.want {
				t.Fatalf("dial: %v, %+v; want HTTP %d", err, resp, tc.want)
			}
		})
	}

	hdr := http.Header{"Cookie": cookie["Cookie"], "Origin": {"http://" + host}, "Sec-Fetch-Site": {"same-origin"}}
	ws, _, err := websocket.DefaultDialer.Dial(wsURL, hdr)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	read := func() string {
		t.Helper()
		ws.SetReadDeadline(time.Now().Add(10 * time.Second))
		kind, p, err := ws.ReadMessage()
		if err != nil {
			t.Fatal(err)
		}
		if kind != websocket.BinaryMessage {
			t.Fatalf("output came as message type %d", kind)
		}
		return string(p)
	}
	// Output is raw bytes, escape sequences and all: the terminal draws them.
	raw := "ls\x1b[31m\x00\xff"
	ws.WriteMessage(websocket.BinaryMessage, []byte(raw))
	if got := read(); got != "echo:"+raw {
		t.Fatalf("got %q", got)
	}
	ws.WriteMessage(websocket.TextMessage, []byte(`{"resize":{"rows":33,"cols":101}}`))
	if got := read(); got != "resized" {
		t.Fatalf("got %q", got)
	}
	core.mu.Lock()
	sizes := strings.Join(core.sizes, ",")
	core.mu.Unlock()
	if sizes != "33x101" {
		t.Fatalf("sizes %q", sizes)
	}
	// The shell ending closes the connection normally.
	ws.WriteMessage(websocket.BinaryMessage, []byte("exit"))
	ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, _, err = ws.ReadMessage()
	if !websocket.IsCloseError(err, TerminalEnded) {
		t.Fatalf("after exit: %v", err)
	}

	// A message over the bound ends the connection rather than being
	// buffered.
	core.out = make(chan []byte, 16)
	ws2, _, err := websocket.DefaultDialer.Dial(wsURL, hdr)
	if err != nil {
		t.Fatal(err)
	}
	defer ws2.Close()
	ws2.WriteMessage(websocket.BinaryMessage, bytes.Repeat([]byte("a"), MaxTerminalMessage+1))
	ws2.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, _, err := ws2.ReadMessage(); err == nil {
		t.Fatal("an oversized message was taken")
	}

	// Open and close are plain requests; an unknown terminal is 404.
	do := func(method, path, body string) *http.Response {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if r := do("POST", "/v1/terminals", `{"rows":24,"cols":80}`); r.StatusCode != http.StatusCreated {
		t.Fatalf("open: %d", r.StatusCode)
	}
	if r := do("DELETE", "/v1/terminals/term1", ""); r.StatusCode != http.StatusNoContent || !core.closed {
		t.Fatalf("close: %d", r.StatusCode)
	}
	_, resp, err := websocket.DefaultDialer.Dial("ws://"+host+"/v1/terminals/nope/attach", hdr)
	if err == nil || resp.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown terminal: %v %+v", err, resp)
	}
}

// TestTerminalByRequest: the terminal without a WebSocket, as the desktop
// window uses it: output by offset, input and resizes as JSON requests.
func TestTerminalByRequest(t *testing.T) {
	core := &termCore{out: make(chan []byte, 16)}
	srv := httptest.NewServer(Handler(core, nil))
	defer srv.Close()
	do := func(method, path, body string) (int, string) {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := do("GET", "/v1/terminals/term1/output?offset=-1", ""); code != 200 || !strings.Contains(body, `"data":"c2NyZWVuG1swbQ=="`) || !strings.Contains(body, `"next":110`) {
		t.Fatalf("screen: %d %s", code, body)
	}
	// Without follow a read does not wait.
	if code, body := do("GET", "/v1/terminals/term1/output?offset=110", ""); code != 200 || !strings.Contains(body, `"next":110`) {
		t.Fatalf("read: %d %s", code, body)
	}
	if code, body := do("POST", "/v1/terminals/term1/input", `{"data":"bHMK"}`); code != http.StatusNoContent {
		t.Fatalf("input: %d %s", code, body)
	}
	if code, body := do("POST", "/v1/terminals/term1/resize", `{"rows":40,"cols":120}`); code != http.StatusNoContent {
		t.Fatalf("resize: %d %s", code, body)
	}
	if code, _ := do("POST", "/v1/terminals/term1/resize", `{"rows":4000,"cols":120}`); code != http.StatusBadRequest {
		t.Fatalf("an impossible size answered %d", code)
	}
	big := `{"data":"` + strings.Repeat("A", MaxTerminalMessage*2) + `"}`
	if code, _ := do("POST", "/v1/terminals/term1/input", big); code != http.StatusBadRequest {
		t.Fatalf("input over the bound answered %d", code)
	}
	if code, _ := do("GET", "/v1/terminals/nope/output", ""); code != http.StatusNotFound {
		t.Fatalf("unknown terminal answered %d", code)
	}
	core.mu.Lock()
	defer core.mu.Unlock()
	if got := strings.Join(core.sizes, ","); got != "input:ls\n,40x120" {
		t.Fatalf("the shell got %q", got)
	}
}

func TestTerminalsNeedTheService(t *testing.T) {
	srv := httptest.NewServer(Handler(&fakeCore{}, nil))
	defer srv.Close()
	resp, err := http.Post(srv.URL+"/v1/terminals", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotImplemented {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

// TestTerminalClient: the client offers the service's terminals over the
// control socket, so a front door in another process (the desktop app
// with its helper) serves them too.
func TestTerminalClient(t *testing.T) {
	core := &termCore{out: make(chan []byte, 16)}
	sock := filepath.Join(t.TempDir(), "run", "airlock.sock")
	l, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go Serve(ctx, l, Handler(core, nil), nil)
	c := NewClient(sock)

	task, err := c.OpenTerminal(ctx, service.TerminalRequest{Rows: 24, Cols: 80})
	if err != nil || task.ID != "term1" || !task.Command.TTY {
		t.Fatalf("open: %+v, %v", task, err)
	}
	tc, err := c.AttachTerminal(ctx, "term1")
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	if _, err := tc.Write([]byte("pwd\r")); err != nil {
		t.Fatal(err)
	}
	if p, err := tc.Next(ctx); err != nil || string(p) != "echo:pwd\r" {
		t.Fatalf("output %q, %v", p, err)
	}
	if err := tc.Resize(50, 132); err != nil {
		t.Fatal(err)
	}
	if p, err := tc.Next(ctx); err != nil || string(p) != "resized" {
		t.Fatalf("output %q, %v", p, err)
	}
	tc.Write([]byte("exit"))
	if _, err := tc.Next(ctx); err != io.EOF {
		t.Fatalf("after the shell ended: %v, want io.EOF", err)
	}
	if _, err := c.AttachTerminal(ctx, "nope"); !errors.Is(err, tasks.ErrNotFound) {
		t.Fatalf("attach to an unknown terminal: %v", err)
	}

	o, err := c.ReadTerminal(ctx, "term1", -1)
	if err != nil || string(o.Data) != "screen\x1b[0m" || o.Next != 110 {
		t.Fatalf("read: %+v, %v", o, err)
	}
	short, stop := context.WithTimeout(ctx, 100*time.Millisecond)
	defer stop()
	if o, err := c.ReadTerminal(short, "term1", 110); err != nil || len(o.Data) != 0 || o.Next != 110 {
		t.Fatalf("a read that found nothing: %+v, %v", o, err)
	}
	if err := c.TerminalInput(ctx, "term1", []byte("id\n")); err != nil {
		t.Fatal(err)
	}
	if err := c.ResizeTerminal(ctx, "term1", 10, 20); err != nil {
		t.Fatal(err)
	}
	if err := c.CloseTerminal(ctx, "term1"); err != nil || !core.closed {
		t.Fatalf("close: %v", err)
	}
	core.mu.Lock()
	defer core.mu.Unlock()
	if got := strings.Join(core.sizes, ","); got != "50x132,input:id\n,10x20" {
		t.Fatalf("the shell got %q", got)
	}
}

// slowConn takes its first input only after a while, as a shell whose VM
// is still booting.
type slowConn struct {
	echoConn
	wait time.Duration
	once sync.Once
}

func (s *slowConn) Write(p []byte) (int, error) {
	s.once.Do(func() { time.Sleep(s.wait) })
	return s.echoConn.Write(p)
}

type slowCore struct{ *termCore }

func (c slowCore) AttachTerminal(context.Context, string) (service.TerminalConn, error) {
	return &slowConn{echoConn: echoConn{c: c.termCore}, wait: 10 * terminalPing}, nil
}

// TestTerminalInputWaitsForTheShell: keys typed while the shell cannot
// take them yet wait, however long that is; the connection is not taken
// for dead meanwhile.
func TestTerminalInputWaitsForTheShell(t *testing.T) {
	defer func(d time.Duration) { terminalPing = d }(terminalPing)
	terminalPing = 50 * time.Millisecond
	core := slowCore{&termCore{out: make(chan []byte, 16)}}
	srv := httptest.NewServer(Handler(core, nil))
	defer srv.Close()
	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http")+"/v1/terminals/term1/attach", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	for i, k := range []string{"e", "c", "h", "o"} {
		ws.WriteMessage(websocket.BinaryMessage, []byte(k))
		if i == 0 {
			time.Sleep(5 * terminalPing) // typing on while the first key waits
		}
	}
	var got string
	ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	for got != "echo:eecho:cecho:hecho:o" {
		_, p, err := ws.ReadMessage()
		if err != nil {
			t.Fatalf("after %q: %v", got, err)
		}
		got += string(p)
	}
}
