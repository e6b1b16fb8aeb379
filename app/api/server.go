// Package api is Airlock's control API: HTTP+JSON over a per-user unix
// socket (0600 in a 0700 folder, peer uid checked), optionally on a
// loopback TCP port guarded by a random token for the browser UI. The
// server is a thin adapter over service.Core, and Client implements
// service.Core over the socket, so front doors work the same in process
// and remotely. Streams (task output, egress decisions, session events) are
// newline-delimited JSON.
package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/airlock-sandbox/airlock/app/changes"
	"github.com/airlock-sandbox/airlock/app/egress"
	"github.com/airlock-sandbox/airlock/app/egress/policy"
	"github.com/airlock-sandbox/airlock/app/secrets"
	"github.com/airlock-sandbox/airlock/app/service"
	"github.com/airlock-sandbox/airlock/app/tasks"
	"github.com/airlock-sandbox/airlock/app/workspace"
)

// MaxRequestBody bounds a request body: a run request with its stdin.
const MaxRequestBody = service.MaxStdin*4/3 + 1<<20

// Handler returns the API's routes over core.
func Handler(core service.Core, log *slog.Logger, opts ...Option) http.Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h := &handler{core: core, log: log}
	for _, o := range opts {
		o(h)
	}
	m := http.NewServeMux()
	m.HandleFunc("GET /v1/status", h.status)
	m.HandleFunc("GET /v1/settings", h.settings)
	m.HandleFunc("POST /v1/vm/{action}", h.vm)
	m.HandleFunc("PUT /v1/workspace", h.workspace)
	m.HandleFunc("PUT /v1/image", h.image)
	m.HandleFunc("PUT /v1/machine", h.machine)
	m.HandleFunc("POST /v1/disk/reset", h.resetDisk)
	m.HandleFunc("POST /v1/tasks", h.run)
	m.HandleFunc("GET /v1/tasks", h.tasks)
	m.HandleFunc("GET /v1/tasks/{id}", h.task)
	m.HandleFunc("GET /v1/tasks/{id}/wait", h.wait)
	m.HandleFunc("POST /v1/tasks/{id}/cancel", h.cancel)
	m.HandleFunc("GET /v1/tasks/{id}/log", h.logs)
	m.HandleFunc("GET /v1/egress/log", h.egressLog)
	m.HandleFunc("POST /v1/egress/rules", h.egressRule)
	m.HandleFunc("GET /v1/events", h.events)
	m.HandleFunc("GET /v1/asks", h.asks)
	m.HandleFunc("POST /v1/asks/{id}", h.answerAsk)
	m.HandleFunc("GET /v1/secrets", h.secrets)
	m.HandleFunc("PUT /v1/secrets/{name}", h.setSecret)
	m.HandleFunc("DELETE /v1/secrets/{name}", h.removeSecret)
	m.HandleFunc("GET /v1/changes", h.changes)
	m.HandleFunc("GET /v1/changes/diff", h.diff)
	m.HandleFunc("GET /v1/changes/content", h.content)
	m.HandleFunc("POST /v1/changes/apply", h.apply)
	m.HandleFunc("POST /v1/changes/discard", h.discard)
	m.HandleFunc("GET /v1/checkpoints", h.checkpoints)
	m.HandleFunc("POST /v1/checkpoints/undo", h.undo)
	m.HandleFunc("GET /v1/agents", h.listAgents)
	m.HandleFunc("POST /v1/agents/{name}/{action}", h.changeAgent)
	m.HandleFunc("POST /v1/terminals", h.openTerminal)
	m.HandleFunc("GET /v1/terminals/{id}/attach", h.attachTerminal)
	m.HandleFunc("DELETE /v1/terminals/{id}", h.closeTerminal)
	m.HandleFunc("GET /v1/terminals/{id}/output", h.terminalOutput)
	m.HandleFunc("POST /v1/terminals/{id}/input", h.terminalInputRequest)
	m.HandleFunc("POST /v1/terminals/{id}/resize", h.resizeTerminal)
	return m
}

type handler struct {
	core   service.Core
	log    *slog.Logger
	agents *Agents // nil: the agent endpoints answer errNoAgents
}

// apiError is the body of every error answer.
type apiError struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

// Error codes, mapped to and from Go errors by both sides.
const (
	codeNotFound = "not_found"
	codeInvalid  = "invalid"
	codeRefused  = "refused"
	codeInUse    = "in_use"
	codeInternal = "internal"
)

func (h *handler) fail(w http.ResponseWriter, err error) {
	status, code := http.StatusInternalServerError, codeInternal
	switch {
	case errors.Is(err, tasks.ErrNotFound), errors.Is(err, service.ErrNoSuchAsk), errors.Is(err, fs.ErrNotExist):
		status, code = http.StatusNotFound, codeNotFound
	case errors.Is(err, service.ErrNotTerminal):
		status, code = http.StatusNotFound, codeNotFound
	case errors.Is(err, errNoAgents), errors.Is(err, errNoTerminals):
		status, code = http.StatusNotImplemented, codeInternal
	case errors.Is(err, workspace.ErrRefused):
		status, code = http.StatusBadRequest, codeRefused
	case errors.Is(err, changes.ErrInUse):
		status, code = http.StatusConflict, codeInUse
	case errors.Is(err, errInvalid), errors.Is(err, policy.ErrInvalidEntry), errors.Is(err, tasks.ErrOffset),
		errors.Is(err, secrets.ErrInvalid), errors.Is(err, secrets.ErrNoValue),
		errors.Is(err, service.ErrBadMode), errors.Is(err, service.ErrNoWorkspace):
		status, code = http.StatusBadRequest, codeInvalid
	}
	writeJSON(w, status, apiError{Error: err.Error(), Code: code})
}

var errInvalid = errors.New("invalid request")

// invalid marks err as the client's mistake (HTTP 400) without changing its
// message.
func invalid(err error) error { return invalidError{err} }

type invalidError struct{ error }

func (e invalidError) Is(target error) bool { return target == errInvalid }
func (e invalidError) Unwrap() error        { return e.error }

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (h *handler) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxRequestBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		h.fail(w, invalid(err))
		return false
	}
	return true
}

func (h *handler) answer(w http.ResponseWriter, v any, err error) {
	if err != nil {
		h.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

func (h *handler) status(w http.ResponseWriter, r *http.Request) {
	st, err := h.core.Status(r.Context())
	h.answer(w, st, err)
}

func (h *handler) settings(w http.ResponseWriter, r *http.Request) {
	st, err := h.core.Settings(r.Context())
	h.answer(w, st, err)
}

func (h *handler) vm(w http.ResponseWriter, r *http.Request) {
	var err error
	switch r.PathValue("action") {
	case "start":
		err = h.core.StartVM(r.Context())
	case "stop":
		err = h.core.StopVM(r.Context())
	case "restart":
		err = h.core.RestartVM(r.Context())
	default:
		err = invalid(errors.New("unknown action: use start, stop or restart"))
	}
	h.statusAfter(w, r, err)
}

// statusAfter answers a change with the service's status once it is made,
// or with why it failed.
func (h *handler) statusAfter(w http.ResponseWriter, r *http.Request, err error) {
	if err != nil {
		h.fail(w, err)
		return
	}
	h.status(w, r)
}

// WorkspaceRequest is the body of PUT /v1/workspace.
type WorkspaceRequest struct {
	Dir      string `json:"dir"`
	ReadOnly bool   `json:"read_only"`
	// Changes is the folder's changes mode: direct, review or auto; ""
	// keeps the one it has (auto for a new folder).
	Changes changes.Mode `json:"changes,omitempty"`
}

func (h *handler) workspace(w http.ResponseWriter, r *http.Request) {
	var req WorkspaceRequest
	if h.decode(w, r, &req) {
		h.statusAfter(w, r, h.core.SetWorkspace(r.Context(), req.Dir, req.ReadOnly, req.Changes))
	}
}

// ImageRequest is the body of PUT /v1/image.
type ImageRequest struct {
	Image    string `json:"image"`
	KeepDisk bool   `json:"keep_disk"`
}

func (h *handler) image(w http.ResponseWriter, r *http.Request) {
	var req ImageRequest
	if !h.decode(w, r, &req) {
		return
	}
	err := h.core.SetImage(r.Context(), req.Image, req.KeepDisk)
	if errors.Is(err, service.ErrBadImage) {
		err = invalid(err)
	}
	h.statusAfter(w, r, err)
}

// MachineRequest is the body of PUT /v1/machine.
type MachineRequest struct {
	CPUs      int `json:"cpus"`
	MemoryMiB int `json:"memory_mib"`
}

func (h *handler) machine(w http.ResponseWriter, r *http.Request) {
	var req MachineRequest
	if !h.decode(w, r, &req) {
		return
	}
	err := h.core.SetMachine(r.Context(), req.CPUs, req.MemoryMiB)
	if errors.Is(err, service.ErrBadSize) {
		err = invalid(err)
	}
	h.statusAfter(w, r, err)
}

func (h *handler) resetDisk(w http.ResponseWriter, r *http.Request) {
	h.statusAfter(w, r, h.core.ResetDisk(r.Context()))
}

func (h *handler) run(w http.ResponseWriter, r *http.Request) {
	var req service.RunRequest
	if !h.decode(w, r, &req) {
		return
	}
	t, err := h.core.Run(r.Context(), req)
	if err != nil {
		h.fail(w, invalid(err))
		return
	}
	writeJSON(w, http.StatusCreated, t)
}

func (h *handler) tasks(w http.ResponseWriter, r *http.Request) {
	ts, err := h.core.Tasks(r.Context())
	if ts == nil {
		ts = []tasks.Task{}
	}
	h.answer(w, ts, err)
}

func (h *handler) task(w http.ResponseWriter, r *http.Request) {
	t, err := h.core.Task(r.Context(), r.PathValue("id"))
	h.answer(w, t, err)
}

func (h *handler) wait(w http.ResponseWriter, r *http.Request) {
	t, err := h.core.Wait(r.Context(), r.PathValue("id"))
	h.answer(w, t, err)
}

func (h *handler) cancel(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := h.core.Cancel(r.Context(), id); err != nil {
		h.fail(w, err)
		return
	}
	h.task(w, r)
}

// LogPage is the answer of GET /v1/tasks/{id}/log without follow.
type LogPage struct {
	Chunks []tasks.Chunk `json:"chunks"`
	Next   int64         `json:"next"`
}

func (h *handler) logs(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	offset, err := strconv.ParseInt(r.URL.Query().Get("offset"), 10, 64)
	if r.URL.Query().Get("offset") == "" {
		offset, err = 0, nil
	}
	if err != nil || offset < 0 {
		h.fail(w, invalid(errors.New("offset must be a byte offset ≥ 0")))
		return
	}
	if r.URL.Query().Get("follow") == "" {
		chunks, next, err := h.core.Logs(r.Context(), id, offset)
		if chunks == nil {
			chunks = []tasks.Chunk{}
		}
		h.answer(w, LogPage{Chunks: chunks, Next: next}, err)
		return
	}
	ch, err := h.core.FollowLogs(r.Context(), id, offset)
	if err != nil {
		h.fail(w, err)
		return
	}
	stream(w, r.Context(), ch)
}

func (h *handler) egressLog(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("follow") == "" {
		ds, err := h.core.EgressLog(r.Context())
		if ds == nil {
			ds = []egress.Decision{}
		}
		h.answer(w, ds, err)
		return
	}
	ch, err := h.core.FollowEgress(r.Context())
	if err != nil {
		h.fail(w, err)
		return
	}
	stream(w, r.Context(), ch)
}

// RuleRequest is the body of POST /v1/egress/rules.
type RuleRequest struct {
	// Action is allow, deny or remove.
	Action  string `json:"action"`
	Pattern string `json:"pattern"`
}

func (h *handler) egressRule(w http.ResponseWriter, r *http.Request) {
	var req RuleRequest
	if !h.decode(w, r, &req) {
		return
	}
	st, err := h.core.EgressRule(r.Context(), req.Action, req.Pattern)
	if err != nil {
		err = invalid(err)
	}
	h.answer(w, st, err)
}

func (h *handler) events(w http.ResponseWriter, r *http.Request) {
	ch, err := h.core.Events(r.Context(), r.URL.Query().Get("answer") != "")
	if err != nil {
		h.fail(w, err)
		return
	}
	stream(w, r.Context(), ch)
}

func (h *handler) asks(w http.ResponseWriter, r *http.Request) {
	as, err := h.core.Asks(r.Context())
	if as == nil {
		as = []service.Ask{}
	}
	h.answer(w, as, err)
}

// AnswerRequest is the body of POST /v1/asks/{id}.
type AnswerRequest struct {
	// Verdict is allow-once, allow-always or deny.
	Verdict string `json:"verdict"`
}

func (h *handler) answerAsk(w http.ResponseWriter, r *http.Request) {
	var req AnswerRequest
	if !h.decode(w, r, &req) {
		return
	}
	if err := h.core.Answer(r.Context(), r.PathValue("id"), req.Verdict); err != nil {
		if errors.Is(err, service.ErrNoSuchAsk) {
			h.fail(w, err)
			return
		}
		h.fail(w, invalid(err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *handler) secrets(w http.ResponseWriter, r *http.Request) {
	list, err := h.core.Secrets(r.Context())
	if list == nil {
		list = []service.SecretInfo{}
	}
	h.answer(w, list, err)
}

// setSecret takes the value once, in the body; the answer never holds it.
func (h *handler) setSecret(w http.ResponseWriter, r *http.Request) {
	var req service.SecretRequest
	if !h.decode(w, r, &req) {
		return
	}
	if req.Name == "" {
		req.Name = r.PathValue("name")
	}
	if req.Name != r.PathValue("name") {
		h.fail(w, invalid(errors.New("the name in the body differs from the one in the path")))
		return
	}
	info, err := h.core.SetSecret(r.Context(), req)
	h.answer(w, info, err)
}

func (h *handler) removeSecret(w http.ResponseWriter, r *http.Request) {
	if err := h.core.RemoveSecret(r.Context(), r.PathValue("name")); err != nil {
		h.fail(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// stream writes each value of ch as one JSON line, flushing as it goes,
// until ch closes or the client goes away.
func stream[T any](w http.ResponseWriter, ctx context.Context, ch <-chan T) {
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	enc := json.NewEncoder(w)
	if flusher != nil {
		flusher.Flush()
	}
	keepalive := time.NewTicker(15 * time.Second)
	defer keepalive.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case v, ok := <-ch:
			if !ok {
				return
			}
			if enc.Encode(v) != nil {
				return
			}
		case <-keepalive.C:
			// An empty line keeps proxies and idle timers from cutting
			// a quiet stream; readers skip it.
			if _, err := io.WriteString(w, "\n"); err != nil {
				return
			}
		}
		if flusher != nil {
			flusher.Flush()
		}
	}
}
