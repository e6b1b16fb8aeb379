package api

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"

	"github.com/airlock-sandbox/airlock/app/changes"
	"github.com/airlock-sandbox/airlock/app/service"
	"net/http"
	"strconv"
)

// The change endpoints answer with what the guest named (paths, link
// targets) as data: JSON strings, a diff as text/plain, content as bytes
// that never run as a page. Whoever shows them escapes them.

// ApplyRequest is the body of POST /v1/changes/apply.
type ApplyRequest struct {
	Paths []string `json:"paths"`
	Force bool     `json:"force"`
}

// DiscardRequest is the body of POST /v1/changes/discard.
type DiscardRequest struct {
	Paths []string `json:"paths"`
}

// DiscardResult is the answer of POST /v1/changes/discard.
type DiscardResult struct {
	Discarded []string `json:"discarded"`
}

// UndoRequest is the body of POST /v1/checkpoints/undo; "" is the newest.
type UndoRequest struct {
	ID string `json:"id"`
}

// maxPaths bounds the paths one request names.
const maxPaths = 100_000

func (h *handler) changes(w http.ResponseWriter, r *http.Request) {
	l, err := h.core.Changes(r.Context())
	h.answer(w, l, err)
}

// paths reads the repeated path= of a query.
func queryPaths(r *http.Request) ([]string, error) {
	p := r.URL.Query()["path"]
	if len(p) > maxPaths {
		return nil, invalid(errors.New("too many paths in one request"))
	}
	return p, nil
}

func (h *handler) diff(w http.ResponseWriter, r *http.Request) {
	paths, err := queryPaths(r)
	if err != nil {
		h.fail(w, err)
		return
	}
	// The diff is written as it is made; an error before the first byte
	// is answered as one, after it the text ends with it.
	bw := &lazyWriter{w: w}
	if err := h.core.Diff(r.Context(), paths, bw); err != nil {
		if !bw.started {
			h.fail(w, err)
			return
		}
		_, _ = io.WriteString(bw, "\nairlock: the diff stopped: "+err.Error()+"\n")
	}
	if !bw.started {
		bw.start()
	}
	_ = bw.b.Flush()
}

// lazyWriter sends the text/plain headers with the first byte written.
type lazyWriter struct {
	w       http.ResponseWriter
	b       *bufio.Writer
	started bool
}

func (l *lazyWriter) start() {
	l.started = true
	l.w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	l.w.Header().Set("X-Content-Type-Options", "nosniff")
	l.w.Header().Set("Cache-Control", "no-store")
	l.w.WriteHeader(http.StatusOK)
	l.b = bufio.NewWriterSize(l.w, 32<<10)
}

func (l *lazyWriter) Write(p []byte) (int, error) {
	if !l.started {
		l.start()
	}
	return l.b.Write(p)
}

func (h *handler) content(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Query().Get("path")
	if path == "" {
		h.fail(w, invalid(errors.New("name the file: ?path=P")))
		return
	}
	rc, e, err := h.core.Content(r.Context(), path)
	if err != nil {
		h.fail(w, err)
		return
	}
	defer rc.Close()
	head := make([]byte, 512)
	n, err := io.ReadFull(rc, head)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		h.fail(w, err)
		return
	}
	head = head[:n]
	hd := w.Header()
	hd.Set("Content-Type", http.DetectContentType(head))
	// Bytes the guest wrote never run as a page of this origin: no
	// script, no plugin, no sniffing into HTML; an image still shows.
	hd.Set("Content-Security-Policy", "sandbox; default-src 'none'; img-src 'self' data:; style-src 'unsafe-inline'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Cache-Control", "no-store")
	hd.Set("Content-Disposition", "inline")
	if e.Size > 0 {
		hd.Set("Content-Length", strconv.FormatInt(e.Size, 10))
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(head)
	_, _ = io.Copy(w, rc)
}

func (h *handler) apply(w http.ResponseWriter, r *http.Request) {
	var req ApplyRequest
	if !h.decode(w, r, &req) {
		return
	}
	if len(req.Paths) > maxPaths {
		h.fail(w, invalid(errors.New("too many paths in one request")))
		return
	}
	res, err := h.core.Apply(r.Context(), req.Paths, req.Force)
	if res.Applied == nil {
		res.Applied = []string{}
	}
	h.answer(w, res, err)
}

func (h *handler) discard(w http.ResponseWriter, r *http.Request) {
	var req DiscardRequest
	if !h.decode(w, r, &req) {
		return
	}
	if len(req.Paths) > maxPaths {
		h.fail(w, invalid(errors.New("too many paths in one request")))
		return
	}
	done, err := h.core.Discard(r.Context(), req.Paths)
	if done == nil {
		done = []string{}
	}
	h.answer(w, DiscardResult{Discarded: done}, err)
}

func (h *handler) checkpoints(w http.ResponseWriter, r *http.Request) {
	l, err := h.core.Checkpoints(r.Context())
	h.answer(w, l, err)
}

func (h *handler) undo(w http.ResponseWriter, r *http.Request) {
	var req UndoRequest
	if !h.decode(w, r, &req) {
		return
	}
	cp, err := h.core.Undo(r.Context(), req.ID)
	h.answer(w, cp, err)
}

// Changes implements service.Core.
func (c *Client) Changes(ctx context.Context) (l service.ChangesList, err error) {
	return l, c.do(ctx, "GET", "/v1/changes", nil, &l)
}

func pathQuery(paths []string) string {
	if len(paths) == 0 {
		return ""
	}
	return "?" + url.Values{"path": paths}.Encode()
}

// Diff implements service.Core.
func (c *Client) Diff(ctx context.Context, paths []string, w io.Writer) error {
	resp, err := c.send(ctx, "GET", "/v1/changes/diff"+pathQuery(paths), nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(w, resp.Body); err != nil {
		return fmt.Errorf("api: diff: %w", err)
	}
	return nil
}

// Content implements service.Core. The entry carries the path and size
// only.
func (c *Client) Content(ctx context.Context, path string) (io.ReadCloser, changes.Entry, error) {
	resp, err := c.send(ctx, "GET", "/v1/changes/content?"+url.Values{"path": {path}}.Encode(), nil)
	if err != nil {
		return nil, changes.Entry{}, err
	}
	return resp.Body, changes.Entry{Path: path, Size: max(resp.ContentLength, 0)}, nil
}

// Apply implements service.Core.
func (c *Client) Apply(ctx context.Context, paths []string, force bool) (res changes.ApplyResult, err error) {
	return res, c.do(ctx, "POST", "/v1/changes/apply", ApplyRequest{Paths: nonNil(paths), Force: force}, &res)
}

// Discard implements service.Core.
func (c *Client) Discard(ctx context.Context, paths []string) ([]string, error) {
	var res DiscardResult
	err := c.do(ctx, "POST", "/v1/changes/discard", DiscardRequest{Paths: nonNil(paths)}, &res)
	return res.Discarded, err
}

// Checkpoints implements service.Core.
func (c *Client) Checkpoints(ctx context.Context) (l service.CheckpointList, err error) {
	return l, c.do(ctx, "GET", "/v1/checkpoints", nil, &l)
}

// Undo implements service.Core.
func (c *Client) Undo(ctx context.Context, id string) (cp changes.Checkpoint, err error) {
	return cp, c.do(ctx, "POST", "/v1/checkpoints/undo", UndoRequest{ID: id}, &cp)
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
