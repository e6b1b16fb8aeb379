package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"strconv"

	"github.com/airlock-sandbox/airlock/app/changes"
	"github.com/airlock-sandbox/airlock/app/egress"
	"github.com/airlock-sandbox/airlock/app/service"
	"github.com/airlock-sandbox/airlock/app/settings"
	"github.com/airlock-sandbox/airlock/app/tasks"
	"github.com/airlock-sandbox/airlock/app/workspace"
)

// MaxLine bounds one line of a stream the client reads.
const MaxLine = 8 << 20

// Client speaks the control API; it implements service.Core.
type Client struct {
	http *http.Client
	base string
	auth string
}

var _ service.Core = (*Client)(nil)

// NewClient returns a client of the service on the control endpoint at
// path (a unix socket; a named pipe on Windows).
func NewClient(path string) *Client {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return dialControl(ctx, path)
	}}
	return &Client{http: &http.Client{Transport: tr}, base: "http://airlock"}
}

// NewUnixClient is NewClient (kept for callers written before Windows pipes).
func NewUnixClient(path string) *Client { return NewClient(path) }

// NewHTTPClient returns a client of a loopback HTTP listener with its token.
func NewHTTPClient(baseURL, token string) *Client {
	return &Client{http: &http.Client{}, base: baseURL, auth: "Bearer " + token}
}

// ErrNotRunning means no service answers on the socket.
var ErrNotRunning = errors.New("no Airlock service is running")

// Ping reports whether the service answers.
func (c *Client) Ping(ctx context.Context) error {
	_, err := c.Status(ctx)
	return err
}

// remoteError is an error the service answered with.
type remoteError struct {
	status int
	apiError
}

func (e *remoteError) Error() string { return e.apiError.Error }

func (e *remoteError) Is(target error) bool {
	switch e.Code {
	case codeNotFound:
		return target == tasks.ErrNotFound || target == service.ErrNoSuchAsk || target == fs.ErrNotExist
	case codeRefused:
		return target == workspace.ErrRefused
	case codeInUse:
		return target == changes.ErrInUse
	case codeInvalid:
		return target == errInvalid
	}
	return false
}

func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	resp, err := c.send(ctx, method, path, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, MaxLine)).Decode(out); err != nil {
		return fmt.Errorf("api: %s %s: %w", method, path, err)
	}
	return nil
}

func (c *Client) send(ctx context.Context, method, path string, body any) (*http.Response, error) {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, r)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.auth != "" {
		req.Header.Set("Authorization", c.auth)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		var ne *net.OpError
		if errors.As(err, &ne) && ne.Op == "dial" {
			return nil, fmt.Errorf("%w (%v)", ErrNotRunning, ne.Err)
		}
		return nil, fmt.Errorf("api: %w", err)
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		e := &remoteError{status: resp.StatusCode}
		if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&e.apiError); err != nil || e.apiError.Error == "" {
			e.apiError = apiError{Error: fmt.Sprintf("%s %s: %s", method, path, resp.Status), Code: codeInternal}
		}
		return nil, e
	}
	return resp, nil
}

// Status implements service.Core.
func (c *Client) Status(ctx context.Context) (st service.Status, err error) {
	return st, c.do(ctx, "GET", "/v1/status", nil, &st)
}

// Settings implements service.Core.
func (c *Client) Settings(ctx context.Context) (st settings.Settings, err error) {
	return st, c.do(ctx, "GET", "/v1/settings", nil, &st)
}

// StartVM implements service.Core.
func (c *Client) StartVM(ctx context.Context) error {
	return c.do(ctx, "POST", "/v1/vm/start", nil, nil)
}

// StopVM implements service.Core.
func (c *Client) StopVM(ctx context.Context) error { return c.do(ctx, "POST", "/v1/vm/stop", nil, nil) }

// RestartVM implements service.Core.
func (c *Client) RestartVM(ctx context.Context) error {
	return c.do(ctx, "POST", "/v1/vm/restart", nil, nil)
}

// SetWorkspace implements service.Core.
func (c *Client) SetWorkspace(ctx context.Context, dir string, readOnly bool, mode changes.Mode) error {
	return c.do(ctx, "PUT", "/v1/workspace", WorkspaceRequest{Dir: dir, ReadOnly: readOnly, Changes: mode}, nil)
}

// SetImage implements service.Core.
func (c *Client) SetImage(ctx context.Context, image string, keepDisk bool) error {
	return c.do(ctx, "PUT", "/v1/image", ImageRequest{Image: image, KeepDisk: keepDisk}, nil)
}

// SetMachine implements service.Core.
func (c *Client) SetMachine(ctx context.Context, cpus, memoryMiB int) error {
	return c.do(ctx, "PUT", "/v1/machine", MachineRequest{CPUs: cpus, MemoryMiB: memoryMiB}, nil)
}

// ResetDisk implements service.Core.
func (c *Client) ResetDisk(ctx context.Context) error {
	return c.do(ctx, "POST", "/v1/disk/reset", nil, nil)
}

// Run implements service.Core.
func (c *Client) Run(ctx context.Context, req service.RunRequest) (t tasks.Task, err error) {
	return t, c.do(ctx, "POST", "/v1/tasks", req, &t)
}

// Task implements service.Core.
func (c *Client) Task(ctx context.Context, id string) (t tasks.Task, err error) {
	return t, c.do(ctx, "GET", "/v1/tasks/"+url.PathEscape(id), nil, &t)
}

// Tasks implements service.Core.
func (c *Client) Tasks(ctx context.Context) (ts []tasks.Task, err error) {
	return ts, c.do(ctx, "GET", "/v1/tasks", nil, &ts)
}

// Wait implements service.Core.
func (c *Client) Wait(ctx context.Context, id string) (t tasks.Task, err error) {
	return t, c.do(ctx, "GET", "/v1/tasks/"+url.PathEscape(id)+"/wait", nil, &t)
}

// Cancel implements service.Core.
func (c *Client) Cancel(ctx context.Context, id string) error {
	return c.do(ctx, "POST", "/v1/tasks/"+url.PathEscape(id)+"/cancel", nil, nil)
}

// Logs implements service.Core.
func (c *Client) Logs(ctx context.Context, id string, offset int64) ([]tasks.Chunk, int64, error) {
	var p LogPage
	err := c.do(ctx, "GET", "/v1/tasks/"+url.PathEscape(id)+"/log?offset="+strconv.FormatInt(offset, 10), nil, &p)
	return p.Chunks, p.Next, err
}

// FollowLogs implements service.Core.
func (c *Client) FollowLogs(ctx context.Context, id string, offset int64) (<-chan tasks.Chunk, error) {
	return follow[tasks.Chunk](ctx, c, "/v1/tasks/"+url.PathEscape(id)+"/log?follow=1&offset="+strconv.FormatInt(offset, 10))
}

// EgressLog implements service.Core.
func (c *Client) EgressLog(ctx context.Context) (ds []egress.Decision, err error) {
	return ds, c.do(ctx, "GET", "/v1/egress/log", nil, &ds)
}

// FollowEgress implements service.Core.
func (c *Client) FollowEgress(ctx context.Context) (<-chan egress.Decision, error) {
	return follow[egress.Decision](ctx, c, "/v1/egress/log?follow=1")
}

// EgressRule implements service.Core.
func (c *Client) EgressRule(ctx context.Context, action, pattern string) (st settings.Settings, err error) {
	return st, c.do(ctx, "POST", "/v1/egress/rules", RuleRequest{Action: action, Pattern: pattern}, &st)
}

// Events implements service.Core.
func (c *Client) Events(ctx context.Context, answer bool) (<-chan service.Event, error) {
	path := "/v1/events"
	if answer {
		path += "?answer=1"
	}
	return follow[service.Event](ctx, c, path)
}

// Asks implements service.Core.
func (c *Client) Asks(ctx context.Context) (as []service.Ask, err error) {
	return as, c.do(ctx, "GET", "/v1/asks", nil, &as)
}

// Answer implements service.Core.
func (c *Client) Answer(ctx context.Context, id, verdict string) error {
	return c.do(ctx, "POST", "/v1/asks/"+url.PathEscape(id), AnswerRequest{Verdict: verdict}, nil)
}

// Secrets implements service.Core.
func (c *Client) Secrets(ctx context.Context) (list []service.SecretInfo, err error) {
	return list, c.do(ctx, "GET", "/v1/secrets", nil, &list)
}

// SetSecret implements service.Core.
func (c *Client) SetSecret(ctx context.Context, req service.SecretRequest) (info service.SecretInfo, err error) {
	return info, c.do(ctx, "PUT", "/v1/secrets/"+url.PathEscape(req.Name), req, &info)
}

// RemoveSecret implements service.Core.
func (c *Client) RemoveSecret(ctx context.Context, name string) error {
	return c.do(ctx, "DELETE", "/v1/secrets/"+url.PathEscape(name), nil, nil)
}

// follow reads a stream of JSON lines into a channel that closes when the
// stream ends or ctx is done.
func follow[T any](ctx context.Context, c *Client, path string) (<-chan T, error) {
	resp, err := c.send(ctx, "GET", path, nil)
	if err != nil {
		return nil, err
	}
	ch := make(chan T, 16)
	go func() {
		defer close(ch)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), MaxLine)
		for sc.Scan() {
			if len(bytes.TrimSpace(sc.Bytes())) == 0 {
				continue // keep-alive
			}
			var v T
			if json.Unmarshal(sc.Bytes(), &v) != nil {
				return
			}
			select {
			case ch <- v:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch, nil
}
