package mcp

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/app/tasks"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Bounds of the task tools.
const (
	defaultReadBytes = 64 << 10
	maxReadBytes     = 1 << 20
	maxWaitSeconds   = 60
	defaultListLimit = 20
	maxListLimit     = 100
)

// TaskInput names one task.
type TaskInput struct {
	TaskID string `json:"task_id" jsonschema:"the task id returned by run_command, start_task or list_tasks"`
}

// ReadInput is what read_task_output takes.
type ReadInput struct {
	TaskID      string `json:"task_id" jsonschema:"the task id"`
	Offset      int64  `json:"offset,omitempty" jsonschema:"log offset to read from: 0 for the start, or next_offset of the previous reply"`
	MaxBytes    int    `json:"max_bytes,omitempty" jsonschema:"about how many output bytes to return (default 65536, at most 1048576); one log record (up to 64 KiB) may go over it"`
	WaitSeconds int    `json:"wait_seconds,omitempty" jsonschema:"when there is no new output yet and the task is still going, wait up to this many seconds (at most 60) for some"`
}

// OutputPart is a run of output from one stream.
type OutputPart struct {
	Stream string `json:"stream" jsonschema:"stdout or stderr"`
	Offset int64  `json:"offset" jsonschema:"log offset where this part starts"`
	Text   string `json:"text"`
}

// ReadResult is what read_task_output returns.
type ReadResult struct {
	TaskID   string `json:"task_id"`
	State    string `json:"state"`
	ExitCode *int   `json:"exit_code,omitempty"`
	Signal   string `json:"signal,omitempty"`
	Reason   string `json:"reason,omitempty"`
	// Output is the output in the order it was written.
	Output     []OutputPart `json:"output"`
	NextOffset int64        `json:"next_offset" jsonschema:"pass this as offset to continue"`
	More       bool         `json:"more" jsonschema:"more output is already waiting after next_offset"`
	// Finished is true when the task ended and all of its output was read.
	Finished bool   `json:"finished" jsonschema:"the task ended and this reply reaches the end of its output"`
	Note     string `json:"note"`
}

func (h *handlers) readTaskOutput(ctx context.Context, _ *sdk.CallToolRequest, in ReadInput) (*sdk.CallToolResult, ReadResult, error) {
	switch err := checkID(in.TaskID); {
	case err != nil:
		return nil, ReadResult{}, fmt.Errorf("read_task_output: %w", err)
	case in.Offset < 0:
		return nil, ReadResult{}, fmt.Errorf("read_task_output: offset %d is negative: pass 0 or a next_offset from an earlier reply", in.Offset)
	case in.MaxBytes < 0 || in.MaxBytes > maxReadBytes:
		return nil, ReadResult{}, fmt.Errorf("read_task_output: max_bytes must be 1 to %d (default %d)", maxReadBytes, defaultReadBytes)
	case in.WaitSeconds < 0 || in.WaitSeconds > maxWaitSeconds:
		return nil, ReadResult{}, fmt.Errorf("read_task_output: wait_seconds must be 0 to %d", maxWaitSeconds)
	}
	limit := in.MaxBytes
	if limit == 0 {
		limit = defaultReadBytes
	}
	chunks, next, err := h.core.Logs(ctx, in.TaskID, in.Offset)
	if err != nil {
		return nil, ReadResult{}, taskError("read_task_output", in.TaskID, err)
	}
	if len(chunks) == 0 && in.WaitSeconds > 0 {
		if chunks, next, err = h.waitOutput(ctx, in.TaskID, in.Offset, time.Duration(in.WaitSeconds)*time.Second); err != nil {
			return nil, ReadResult{}, taskError("read_task_output", in.TaskID, err)
		}
	}
	var parts []OutputPart
	size := 0
	for i, c := range chunks {
		if i > 0 && size+len(c.Data) > limit {
			next = c.Offset
			break
		}
		size += len(c.Data)
		if n := len(parts); n > 0 && parts[n-1].Stream == c.Stream.String() {
			parts[n-1].Text += string(c.Data)
		} else {
			parts = append(parts, OutputPart{Stream: c.Stream.String(), Offset: c.Offset, Text: string(c.Data)})
		}
	}
	for i := range parts {
		parts[i].Text = safeText(parts[i].Text)
	}
	// The task is read after its log, so its size covers what was read.
	t, err := h.core.Task(ctx, in.TaskID)
	if err != nil {
		return nil, ReadResult{}, taskError("read_task_output", in.TaskID, err)
	}
	ti := info(t, time.Now())
	res := ReadResult{
		TaskID: t.ID, State: ti.State, ExitCode: ti.ExitCode, Signal: ti.Signal, Reason: ti.Reason,
		Output: parts, NextOffset: next, More: next < t.Output.LogBytes,
	}
	if res.Output == nil {
		res.Output = []OutputPart{}
	}
	res.Finished = t.State.Final() && !res.More
	switch {
	case res.More:
		res.Note = fmt.Sprintf("More output is waiting: call again with offset %d.", next)
	case res.Finished:
		res.Note = "The task has ended (" + ti.summary() + ") and this is the end of its output."
	default:
		res.Note = fmt.Sprintf("The task is still %s. Call again with offset %d for what follows (wait_seconds waits for it).", t.State, next)
	}
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: res.text()}}}, res, nil
}

// waitOutput waits up to d for output past offset (or for the task to
// end), then reads it.
func (h *handlers) waitOutput(ctx context.Context, id string, offset int64, d time.Duration) ([]tasks.Chunk, int64, error) {
	t, err := h.core.Task(ctx, id)
	if err != nil || t.State.Final() {
		return nil, offset, err
	}
	wctx, cancel := context.WithTimeout(ctx, d)
	ch, err := h.core.FollowLogs(wctx, id, offset)
	if err != nil {
		cancel()
		return nil, offset, err
	}
	select {
	case <-ch:
	case <-wctx.Done():
	}
	cancel()
	go func() {
		for range ch { // let the stream end
		}
	}()
	return h.core.Logs(ctx, id, offset)
}

func (r ReadResult) text() string {
	var b strings.Builder
	for _, p := range r.Output {
		fmt.Fprintf(&b, "--- %s (offset %d) ---\n%s", p.Stream, p.Offset, p.Text)
		if !strings.HasSuffix(p.Text, "\n") {
			b.WriteByte('\n')
		}
	}
	if len(r.Output) == 0 {
		b.WriteString("(no new output)\n")
	}
	fmt.Fprintf(&b, "--- next_offset %d; %s ---\n%s\n", r.NextOffset, r.State, r.Note)
	return b.String()
}

func (h *handlers) taskStatus(ctx context.Context, _ *sdk.CallToolRequest, in TaskInput) (*sdk.CallToolResult, TaskInfo, error) {
	if err := checkID(in.TaskID); err != nil {
		return nil, TaskInfo{}, fmt.Errorf("task_status: %w", err)
	}
	t, err := h.core.Task(ctx, in.TaskID)
	if err != nil {
		return nil, TaskInfo{}, taskError("task_status", in.TaskID, err)
	}
	return nil, info(t, time.Now()), nil
}

// CancelResult is what cancel_task returns.
type CancelResult struct {
	TaskInfo
	Note string `json:"note"`
}

func (h *handlers) cancelTask(ctx context.Context, _ *sdk.CallToolRequest, in TaskInput) (*sdk.CallToolResult, CancelResult, error) {
	if err := checkID(in.TaskID); err != nil {
		return nil, CancelResult{}, fmt.Errorf("cancel_task: %w", err)
	}
	t, err := h.core.Task(ctx, in.TaskID)
	if err != nil {
		return nil, CancelResult{}, taskError("cancel_task", in.TaskID, err)
	}
	if t.State.Final() {
		return nil, CancelResult{}, fmt.Errorf("cancel_task: task %s has already ended (%s); there is nothing to cancel", t.ID, info(t, time.Now()).summary())
	}
	if err := h.core.Cancel(ctx, t.ID); err != nil {
		return nil, CancelResult{}, taskError("cancel_task", t.ID, err)
	}
	if u, err := h.core.Task(ctx, t.ID); err == nil {
		t = u
	}
	return nil, CancelResult{TaskInfo: info(t, time.Now()),
		Note: "Cancelled: the task got SIGTERM and gets SIGKILL after a grace period if it is still running; task_status shows when it has ended."}, nil
}

// ListInput is what list_tasks takes.
type ListInput struct {
	Limit      int  `json:"limit,omitempty" jsonschema:"how many tasks to return, newest first (default 20, at most 100)"`
	ActiveOnly bool `json:"active_only,omitempty" jsonschema:"only tasks still queued or running"`
}

// ListResult is what list_tasks returns.
type ListResult struct {
	Tasks []TaskInfo `json:"tasks" jsonschema:"newest first"`
	// Matching counts the tasks that matched, before the limit.
	Matching int `json:"matching"`
}

func (h *handlers) listTasks(ctx context.Context, _ *sdk.CallToolRequest, in ListInput) (*sdk.CallToolResult, ListResult, error) {
	if in.Limit < 0 || in.Limit > maxListLimit {
		return nil, ListResult{}, fmt.Errorf("list_tasks: limit must be 1 to %d (default %d)", maxListLimit, defaultListLimit)
	}
	limit := in.Limit
	if limit == 0 {
		limit = defaultListLimit
	}
	all, err := h.core.Tasks(ctx)
	if err != nil {
		return nil, ListResult{}, fmt.Errorf("list_tasks: %w", err)
	}
	now := time.Now()
	res := ListResult{Tasks: []TaskInfo{}}
	for _, t := range slices.Backward(all) {
		if in.ActiveOnly && t.State.Final() {
			continue
		}
		res.Matching++
		if len(res.Tasks) < limit {
			res.Tasks = append(res.Tasks, info(t, now))
		}
	}
	return nil, res, nil
}
