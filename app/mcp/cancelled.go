package mcp

import (
	"bytes"
	"encoding/json"
	"io"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// Bounds of cancelFilter.
const (
	// maxCancelLine: a notifications/cancelled line longer than this is
	// not looked at (the notification is an id and a short reason).
	maxCancelLine = 4 << 10
	// maxCancelled bounds the ids remembered; the oldest go first.
	maxCancelled = 256
)

// cancelFilter keeps the server from answering a request the client
// cancelled with notifications/cancelled. The protocol says a cancelled
// request gets no response, and the TypeScript SDK's client, which desktop
// agents embed, reports one as an error ("Received a response for an
// unknown message ID"). go-sdk v1.8.0 answers every request, and no hook of
// it runs between a handler's return and that answer
// (modelcontextprotocol/go-sdk#1235), so the filter sits on the streams
// Serve hands the SDK: it notes the ids of the cancellations it reads and
// drops a written line that is the response to one of them.
//
// The SDK writes each message with one Write call, so a Write is one line.
// A client must not reuse a request id within a session, so an id that is
// remembered after its response went out (the cancellation came too late)
// matches nothing again; at most maxCancelled are kept.
type cancelFilter struct {
	mu  sync.Mutex
	ids []jsonrpc.ID // oldest first
}

// reader returns r, noting the cancellations that pass through it.
func (f *cancelFilter) reader(r io.ReadCloser) io.ReadCloser {
	return &cancelReader{ReadCloser: r, f: f}
}

// writer returns w without the responses to cancelled requests.
func (f *cancelFilter) writer(w io.WriteCloser) io.WriteCloser {
	return &cancelWriter{WriteCloser: w, f: f}
}

func (f *cancelFilter) add(id jsonrpc.ID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.ids) == maxCancelled {
		f.ids = f.ids[1:]
	}
	f.ids = append(f.ids, id)
}

// take reports whether id was cancelled, and forgets it.
func (f *cancelFilter) take(id jsonrpc.ID) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, c := range f.ids {
		if c == id {
			f.ids = append(f.ids[:i], f.ids[i+1:]...)
			return true
		}
	}
	return false
}

func (f *cancelFilter) empty() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.ids) == 0
}

// wireMessage is what the filter reads of a JSON-RPC message.
type wireMessage struct {
	ID     any    `json:"id"`
	Method string `json:"method"`
	Params struct {
		RequestID any `json:"requestId"`
	} `json:"params"`
}

type cancelReader struct {
	io.ReadCloser
	f *cancelFilter
	// line holds the start of the line being read, up to maxCancelLine;
	// long is set once it went over.
	line []byte
	long bool
}

func (r *cancelReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	for b := p[:n]; len(b) > 0; {
		i := bytes.IndexByte(b, '\n')
		seg := b
		if i >= 0 {
			seg = b[:i]
		}
		if !r.long && len(r.line)+len(seg) <= maxCancelLine {
			r.line = append(r.line, seg...)
		} else {
			r.long = true
		}
		if i < 0 {
			break
		}
		if !r.long {
			r.noteCancels(r.line)
		}
		r.line, r.long = r.line[:0], false
		b = b[i+1:]
	}
	return n, err
}

// noteCancels records the requests line cancels: a notification or a
// batch holding some.
func (r *cancelReader) noteCancels(line []byte) {
	if !bytes.Contains(line, []byte(`"notifications/cancelled"`)) {
		return
	}
	var msgs []wireMessage
	if err := json.Unmarshal(line, &msgs); err != nil {
		var m wireMessage
		if json.Unmarshal(line, &m) != nil {
			return
		}
		msgs = []wireMessage{m}
	}
	for _, m := range msgs {
		if m.Method != "notifications/cancelled" || m.ID != nil || m.Params.RequestID == nil {
			continue
		}
		if id, err := jsonrpc.MakeID(m.Params.RequestID); err == nil {
			r.f.add(id)
		}
	}
}

type cancelWriter struct {
	io.WriteCloser
	f *cancelFilter
}

func (w *cancelWriter) Write(p []byte) (int, error) {
	if !w.f.empty() && bytes.HasPrefix(bytes.TrimSpace(p), []byte("{")) {
		var m wireMessage
		if json.Unmarshal(p, &m) == nil && m.Method == "" && m.ID != nil {
			if id, err := jsonrpc.MakeID(m.ID); err == nil && w.f.take(id) {
				return len(p), nil
			}
		}
	}
	return w.WriteCloser.Write(p)
}
