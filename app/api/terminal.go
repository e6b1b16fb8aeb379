package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/airlock-sandbox/airlock/app/service"
	"github.com/gorilla/websocket"
)

// Terminal endpoints:
//
//	POST   /v1/terminals              body TerminalRequest → 201 the task
//	GET    /v1/terminals/{id}/attach  WebSocket
//	DELETE /v1/terminals/{id}         ends the shell → 204
//
// and, for a window that cannot hold a WebSocket (a desktop webview), the
// same terminal by request:
//
//	GET  /v1/terminals/{id}/output?offset=N&follow=1  → TerminalOutput
//	POST /v1/terminals/{id}/input   body TerminalInput → 204
//	POST /v1/terminals/{id}/resize  body TerminalResize → 204
//
// On the WebSocket the server's binary messages are the shell's output,
// raw (the recent screen first); the client's binary messages are input,
// and its text messages are JSON controls ({"resize":{"rows":R,"cols":C}}).
// When the shell ends the server closes with TerminalEnded.
const (
	// MaxTerminalMessage bounds one message from the client: a keystroke,
	// a pasted chunk (the UI sends long pastes in pieces) or a control.
	MaxTerminalMessage = 64 << 10
	// TerminalEnded is the close code when the shell ended.
	TerminalEnded = websocket.CloseNormalClosure
	// terminalWriteWait bounds one write to the client.
	terminalWriteWait = 10 * time.Second
)

// terminalPing is how often the server pings a quiet connection; a client
// that answers nothing for 3 pings is gone. A variable only so tests need
// not wait a minute.
var terminalPing = 20 * time.Second

// TerminalControl is a text message on a terminal's WebSocket.
type TerminalControl struct {
	Resize *struct {
		Rows uint16 `json:"rows"`
		Cols uint16 `json:"cols"`
	} `json:"resize,omitempty"`
}

// TerminalInput is the body of POST /v1/terminals/{id}/input: bytes
// for the shell (base64 in JSON), at most MaxTerminalMessage.
type TerminalInput struct {
	Data []byte `json:"data"`
}

// TerminalResize is the body of POST /v1/terminals/{id}/resize.
type TerminalResize struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// terminalPollWait bounds how long a read of a terminal's output waits
// for some (the desktop window cuts it shorter).
const terminalPollWait = 25 * time.Second

var errNoTerminals = errors.New("this Airlock front door cannot open terminals: use the app or `airlock serve --http`")

var upgrader = websocket.Upgrader{
	ReadBufferSize: 4 << 10, WriteBufferSize: 32 << 10,
	// The default CheckOrigin: a browser's Origin must be this host; the
	// token check (RequireToken) already refused other origins on the
	// loopback door, and the control socket's clients send none.
}

func (h *handler) terminals() (service.Terminals, bool) {
	t, ok := h.core.(service.Terminals)
	return t, ok
}

func (h *handler) openTerminal(w http.ResponseWriter, r *http.Request) {
	terms, ok := h.terminals()
	if !ok {
		h.fail(w, errNoTerminals)
		return
	}
	var req service.TerminalRequest
	if !h.decode(w, r, &req) {
		return
	}
	t, err := terms.OpenTerminal(r.Context(), req)
	if err != nil {
		h.fail(w, invalid(err))
		return
	}
	writeJSON(w, http.StatusCreated, t)
}

func (h *handler) closeTerminal(w http.ResponseWriter, r *http.Request) {
	terms, ok := h.terminals()
	if !ok {
		h.fail(w, errNoTerminals)
		return
	}
	if err := terms.CloseTerminal(r.Context(), r.PathValue("id")); err != nil {
		h.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *handler) attachTerminal(w http.ResponseWriter, r *http.Request) {
	terms, ok := h.terminals()
	if !ok {
		h.fail(w, errNoTerminals)
		return
	}
	if !websocket.IsWebSocketUpgrade(r) {
		h.fail(w, invalid(errors.New("attach is a WebSocket: connect with one")))
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tc, err := terms.AttachTerminal(ctx, r.PathValue("id"))
	if err != nil {
		h.fail(w, err)
		return
	}
	defer tc.Close()
	ws, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader answered the client
	}
	defer ws.Close()
	ws.SetReadLimit(MaxTerminalMessage)
	alive := func() { _ = ws.SetReadDeadline(time.Now().Add(3 * terminalPing)) }
	alive()
	ws.SetPongHandler(func(string) error { alive(); return nil })

	go func() {
		defer cancel()
		h.terminalInput(ws, tc, alive)
	}()

	// Output: this goroutine is the only writer (pings included).
	out := make(chan []byte)
	outErr := make(chan error, 1)
	go func() {
		for {
			p, err := tc.Next(ctx)
			if err != nil {
				outErr <- err
				return
			}
			select {
			case out <- p:
			case <-ctx.Done():
				outErr <- ctx.Err()
				return
			}
		}
	}()
	ping := time.NewTicker(terminalPing)
	defer ping.Stop()
	for {
		var err error
		select {
		case p := <-out:
			_ = ws.SetWriteDeadline(time.Now().Add(terminalWriteWait))
			err = ws.WriteMessage(websocket.BinaryMessage, p)
		case <-ping.C:
			err = ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(terminalWriteWait))
		case err = <-outErr:
			code, text := websocket.CloseGoingAway, "detached"
			switch {
			case errors.Is(err, io.EOF):
				code, text = TerminalEnded, "the shell ended"
			case ctx.Err() == nil:
				code, text = websocket.CloseTryAgainLater, err.Error()
			}
			_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, clip(text, 120)), time.Now().Add(terminalWriteWait))
			return
		}
		if err != nil {
			return
		}
	}
}

func (h *handler) terminalOutput(w http.ResponseWriter, r *http.Request) {
	terms, ok := h.terminals()
	if !ok {
		h.fail(w, errNoTerminals)
		return
	}
	offset := int64(-1)
	if q := r.URL.Query().Get("offset"); q != "" {
		n, err := strconv.ParseInt(q, 10, 64)
		if err != nil {
			h.fail(w, invalid(errors.New("offset must be a byte offset, or -1 for the recent screen")))
			return
		}
		offset = n
	}
	ctx := r.Context()
	if r.URL.Query().Get("follow") == "" {
		// Without follow, answer at once with what there is.
		c, cancel := context.WithCancel(ctx)
		cancel()
		ctx = c
	} else {
		c, cancel := context.WithTimeout(ctx, terminalPollWait)
		defer cancel()
		ctx = c
	}
	out, err := terms.ReadTerminal(ctx, r.PathValue("id"), offset)
	w.Header().Set("Cache-Control", "no-store")
	h.answer(w, out, err)
}

func (h *handler) terminalInputRequest(w http.ResponseWriter, r *http.Request) {
	terms, ok := h.terminals()
	if !ok {
		h.fail(w, errNoTerminals)
		return
	}
	var req TerminalInput
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxTerminalMessage*4/3+1024))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		h.fail(w, invalid(err))
		return
	}
	if err := terms.TerminalInput(r.Context(), r.PathValue("id"), req.Data); err != nil {
		h.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *handler) resizeTerminal(w http.ResponseWriter, r *http.Request) {
	terms, ok := h.terminals()
	if !ok {
		h.fail(w, errNoTerminals)
		return
	}
	var req TerminalResize
	if !h.decode(w, r, &req) {
		return
	}
	if err := terms.ResizeTerminal(r.Context(), r.PathValue("id"), req.Rows, req.Cols); err != nil {
		if !errors.Is(err, service.ErrNotTerminal) {
			err = invalid(err)
		}
		h.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// terminalInput passes the client's messages to the shell until the
// connection ends.
func (h *handler) terminalInput(ws *websocket.Conn, tc service.TerminalConn, alive func()) {
	for {
		kind, p, err := ws.ReadMessage()
		if err != nil {
			return
		}
		alive()
		switch kind {
		case websocket.BinaryMessage:
			// Input waits while the shell is not taking it (the VM is
			// still booting, say); that wait is no sign of a dead client,
			// so the read deadline is off during it and starts afresh
			// after.
			_ = ws.SetReadDeadline(time.Time{})
			if _, err := tc.Write(p); err != nil {
				return
			}
			alive()
		case websocket.TextMessage:
			var c TerminalControl
			if err := json.Unmarshal(p, &c); err != nil || c.Resize == nil {
				h.log.Debug("terminal: a control message that is not a resize was ignored")
				continue
			}
			if err := tc.Resize(c.Resize.Rows, c.Resize.Cols); err != nil {
				h.log.Debug("terminal: resize refused", "err", err)
			}
		}
	}
}

// clip cuts s to at most n bytes: a close reason must fit a control frame.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
