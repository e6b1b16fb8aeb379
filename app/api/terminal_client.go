package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/app/service"
	"github.com/airlock-sandbox/airlock/app/tasks"
	"github.com/gorilla/websocket"
)

// The client offers terminals too, so a front door over the control
// socket (the desktop app with a helper or a running service) serves
// them as the service itself does.
var _ service.Terminals = (*Client)(nil)

// OpenTerminal implements service.Terminals.
func (c *Client) OpenTerminal(ctx context.Context, req service.TerminalRequest) (t tasks.Task, err error) {
	return t, c.do(ctx, "POST", "/v1/terminals", req, &t)
}

// CloseTerminal implements service.Terminals.
func (c *Client) CloseTerminal(ctx context.Context, id string) error {
	return c.do(ctx, "DELETE", "/v1/terminals/"+url.PathEscape(id), nil, nil)
}

// ReadTerminal implements service.Terminals. The service waits at most
// terminalPollWait; a read that ends sooner than ctx answers no output.
func (c *Client) ReadTerminal(ctx context.Context, id string, offset int64) (o service.TerminalOutput, err error) {
	err = c.do(ctx, "GET", "/v1/terminals/"+url.PathEscape(id)+"/output?follow=1&offset="+strconv.FormatInt(offset, 10), nil, &o)
	if err != nil && ctx.Err() != nil {
		return service.TerminalOutput{Offset: offset, Next: offset}, nil
	}
	return o, err
}

// TerminalInput implements service.Terminals.
func (c *Client) TerminalInput(ctx context.Context, id string, data []byte) error {
	return c.do(ctx, "POST", "/v1/terminals/"+url.PathEscape(id)+"/input", TerminalInput{Data: data}, nil)
}

// ResizeTerminal implements service.Terminals.
func (c *Client) ResizeTerminal(ctx context.Context, id string, rows, cols uint16) error {
	return c.do(ctx, "POST", "/v1/terminals/"+url.PathEscape(id)+"/resize", TerminalResize{Rows: rows, Cols: cols}, nil)
}

// AttachTerminal implements service.Terminals over the terminal's
// WebSocket; the connection ends with ctx.
func (c *Client) AttachTerminal(ctx context.Context, id string) (service.TerminalConn, error) {
	d := websocket.Dialer{HandshakeTimeout: 30 * time.Second, ReadBufferSize: 32 << 10, WriteBufferSize: 4 << 10}
	if tr, ok := c.http.Transport.(*http.Transport); ok && tr.DialContext != nil {
		d.NetDialContext = tr.DialContext
	}
	hdr := http.Header{}
	if c.auth != "" {
		hdr.Set("Authorization", c.auth)
	}
	u := "ws" + strings.TrimPrefix(c.base, "http") + "/v1/terminals/" + url.PathEscape(id) + "/attach"
	ws, resp, err := d.DialContext(ctx, u, hdr)
	if err != nil {
		if resp != nil && resp.StatusCode >= 300 {
			defer resp.Body.Close()
			e := &remoteError{status: resp.StatusCode}
			if json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&e.apiError) == nil && e.apiError.Error != "" {
				return nil, e
			}
		}
		var ne *net.OpError
		if errors.As(err, &ne) && ne.Op == "dial" {
			return nil, fmt.Errorf("%w (%v)", ErrNotRunning, ne.Err)
		}
		return nil, fmt.Errorf("api: attach terminal %s: %w", id, err)
	}
	ws.SetReadLimit(int64(service.TerminalScrollback) + MaxTerminalMessage)
	tc := &socketTerminal{ws: ws}
	context.AfterFunc(ctx, tc.Close)
	return tc, nil
}

// socketTerminal is a terminal attached over its WebSocket.
type socketTerminal struct {
	ws *websocket.Conn
	mu sync.Mutex // one writer at a time
}

func (t *socketTerminal) Next(ctx context.Context) ([]byte, error) {
	stop := context.AfterFunc(ctx, t.Close)
	defer stop()
	for {
		kind, p, err := t.ws.ReadMessage()
		switch {
		case websocket.IsCloseError(err, TerminalEnded):
			return nil, io.EOF
		case err != nil && ctx.Err() != nil:
			return nil, ctx.Err()
		case err != nil:
			return nil, fmt.Errorf("terminal: %w", err)
		case kind == websocket.BinaryMessage && len(p) > 0:
			return p, nil
		}
	}
}

func (t *socketTerminal) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for off := 0; off < len(p); off += MaxTerminalMessage {
		end := min(off+MaxTerminalMessage, len(p))
		if err := t.ws.WriteMessage(websocket.BinaryMessage, p[off:end]); err != nil {
			return off, fmt.Errorf("terminal: %w", err)
		}
	}
	return len(p), nil
}

func (t *socketTerminal) Resize(rows, cols uint16) error {
	var c TerminalControl
	c.Resize = &struct {
		Rows uint16 `json:"rows"`
		Cols uint16 `json:"cols"`
	}{rows, cols}
	b, _ := json.Marshal(c)
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ws.WriteMessage(websocket.TextMessage, b)
}

func (t *socketTerminal) Close() { t.ws.Close() }
