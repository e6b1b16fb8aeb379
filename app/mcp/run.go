package mcp

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/app/tasks"
	"github.com/airlock-sandbox/airlock/internal/printable"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// RunResult is what run_command returns: the task, and its output, cut in
// the middle when long.
type RunResult struct {
	TaskInfo
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
	// StdoutOmitted and StderrOmitted count the bytes cut from the middle.
	StdoutOmitted int64  `json:"stdout_omitted_bytes,omitempty"`
	StderrOmitted int64  `json:"stderr_omitted_bytes,omitempty"`
	NextOffset    int64  `json:"next_offset" jsonschema:"read_task_output offset just past the output read here"`
	Note          string `json:"note,omitempty" jsonschema:"what was left out and how to read it, or how to follow a task still running"`
}

// StartResult is what start_task returns.
type StartResult struct {
	TaskInfo
	Note string `json:"note"`
}

func (h *handlers) runCommand(ctx context.Context, call *sdk.CallToolRequest, in CommandInput) (*sdk.CallToolResult, RunResult, error) {
	req, err := in.request(h.opts.DefaultTimeout, h.opts.MaxTimeout, h.opts.MaxStdin)
	if err != nil {
		return nil, RunResult{}, fmt.Errorf("run_command: %w", err)
	}
	t, err := h.core.Run(ctx, req)
	if err != nil {
		return nil, RunResult{}, fmt.Errorf("run_command: the sandbox did not take the task: %w", err)
	}
	if tok := call.Params.GetProgressToken(); tok != nil && call.Session != nil {
		stop := h.progress(ctx, call.Session, tok, t.ID)
		defer stop()
	}
	// The task's own timeout starts when it starts; the margin covers the
	// time it may spend queued while a VM boots.
	waitCtx, cancel := context.WithTimeout(ctx, req.Timeout+h.opts.WaitMargin)
	defer cancel()
	final, err := h.core.Wait(waitCtx, t.ID)
	switch {
	case err != nil && ctx.Err() != nil:
		// The client gave up on the request: the task goes with it.
		h.cancelAbandoned(ctx, t.ID)
		return nil, RunResult{}, fmt.Errorf("run_command: the request was cancelled, so task %s was cancelled too", t.ID)
	case err != nil && waitCtx.Err() == nil:
		return nil, RunResult{}, fmt.Errorf("run_command: task %s was started but waiting for it failed: %w; check it with task_status", t.ID, err)
	case err != nil:
		// Still queued or running after the wait: report what is there.
		if final, err = h.core.Task(ctx, t.ID); err != nil {
			return nil, RunResult{}, taskError("run_command", t.ID, err)
		}
	}
	res, err := h.collect(ctx, final)
	if err != nil {
		return nil, RunResult{}, err
	}
	if final.State == tasks.Lost {
		// The command did not run to its end, so the call failed; what it
		// printed before is still returned.
		res.Note = strings.TrimSpace(fmt.Sprintf("Task %s was lost: the sandbox's VM stopped or failed before the command ended "+
			"(the user may have stopped or restarted it), so how it would have ended is unknown. "+
			"The next command starts the sandbox again: run it again if it is safe to repeat, or ask the user whether they stopped the sandbox on purpose.\n%s",
			final.ID, res.Note))
		return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: res.text()}}}, res, nil
	}
	return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: res.text()}}}, res, nil
}

// progress sends the client notifications/progress about task id for the
// request whose progress token is token, until the returned stop is
// called: whenever the task's state or output size changed, looked at every
// Options.ProgressEvery, and at least every ten of those when nothing
// changed, so a client that restarts its request timeout on progress goes
// on waiting for a long, quiet command. The progress is the seconds since
// the request; no total is given, since how long a command takes is not
// known.
func (h *handlers) progress(ctx context.Context, ss *sdk.ServerSession, token any, id string) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(h.opts.ProgressEvery)
		defer tick.Stop()
		start := time.Now()
		var last tasks.Task
		var sent time.Time
		var progress float64
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			t, err := h.core.Task(ctx, id)
			if err != nil {
				continue
			}
			now := time.Now()
			if !sent.IsZero() && t.State == last.State && t.Output.LogBytes == last.Output.LogBytes && now.Sub(sent) < 10*h.opts.ProgressEvery {
				continue
			}
			last, sent = t, now
			progress = max(now.Sub(start).Round(time.Millisecond).Seconds(), progress+0.001)
			if err := ss.NotifyProgress(ctx, &sdk.ProgressNotificationParams{
				ProgressToken: token, Progress: progress, Message: progressMessage(t, now),
			}); err != nil && ctx.Err() == nil {
				h.opts.Logger.Debug("mcp: progress", "task", id, "err", err)
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// progressMessage says where a task is, for a client to show while it waits.
func progressMessage(t tasks.Task, now time.Time) string {
	switch {
	case t.State == tasks.Queued:
		return fmt.Sprintf("task %s queued for %s: the sandbox is starting", t.ID, now.Sub(t.Created).Round(time.Second))
	case t.State == tasks.Running:
		return fmt.Sprintf("task %s running for %s: %d bytes of output so far", t.ID, now.Sub(t.Started).Round(time.Second), t.Output.Stdout+t.Output.Stderr)
	}
	return fmt.Sprintf("task %s %s: %d bytes of output", t.ID, t.State, t.Output.Stdout+t.Output.Stderr)
}

func (h *handlers) startTask(ctx context.Context, _ *sdk.CallToolRequest, in CommandInput) (*sdk.CallToolResult, StartResult, error) {
	req, err := in.request(h.opts.MaxTimeout, 4*h.opts.MaxTimeout, h.opts.MaxStdin)
	if err != nil {
		return nil, StartResult{}, fmt.Errorf("start_task: %w", err)
	}
	t, err := h.core.Run(ctx, req)
	if err != nil {
		return nil, StartResult{}, fmt.Errorf("start_task: the sandbox did not take the task: %w", err)
	}
	return nil, StartResult{
		TaskInfo: info(t, time.Now()),
		Note: fmt.Sprintf("Task %s is %s and will be killed after %s. Read its output with read_task_output {\"task_id\": %q, \"offset\": 0}, "+
			"then pass each reply's next_offset; stop it with cancel_task.", t.ID, t.State, req.Timeout, t.ID),
	}, nil
}

// cancelAbandoned cancels a task whose request went away, on a context of
// its own since the request's is done.
func (h *handlers) cancelAbandoned(ctx context.Context, id string) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelTimeout)
	defer cancel()
	if err := h.core.Cancel(cctx, id); err != nil {
		h.opts.Logger.Warn("mcp: cancel an abandoned task", "task", id, "err", err)
	}
}

// collect reads t's log from the start (up to maxScan bytes) into a
// RunResult, keeping the head and tail of each stream.
func (h *handlers) collect(ctx context.Context, t tasks.Task) (RunResult, error) {
	out, errs := newClip(h.opts.OutputLimit), newClip(h.opts.OutputLimit)
	var off int64
	for off < maxScan {
		chunks, next, err := h.core.Logs(ctx, t.ID, off)
		if err != nil {
			return RunResult{}, taskError("read the output of task", t.ID, err)
		}
		if len(chunks) == 0 || next <= off {
			break
		}
		for _, c := range chunks {
			if c.Stream == tasks.Stderr {
				errs.add(c)
			} else {
				out.add(c)
			}
		}
		off = next
	}
	res := RunResult{TaskInfo: info(t, time.Now()), NextOffset: off}
	var outFrom, errFrom int64
	res.Stdout, res.StdoutOmitted, outFrom = out.text(t.ID)
	res.Stderr, res.StderrOmitted, errFrom = errs.text(t.ID)
	var notes []string
	if res.StdoutOmitted > 0 || res.StderrOmitted > 0 {
		from := outFrom
		if from < 0 || errFrom >= 0 && errFrom < from {
			from = errFrom
		}
		var cut []string
		for _, o := range []struct {
			name string
			n    int64
		}{{"stdout", res.StdoutOmitted}, {"stderr", res.StderrOmitted}} {
			if o.n > 0 {
				cut = append(cut, fmt.Sprintf("%d bytes of %s", o.n, o.name))
			}
		}
		notes = append(notes, fmt.Sprintf("Output was cut: %s left out of the middle. The full output is in the task's log: "+
			"read_task_output {\"task_id\": %q, \"offset\": %d} returns everything from the first left-out part on (offset 0: from the start).",
			strings.Join(cut, " and "), t.ID, from))
	}
	if off >= maxScan && off < t.Output.LogBytes {
		notes = append(notes, fmt.Sprintf("The log is %d bytes; only the first %d were read here. Continue with read_task_output {\"task_id\": %q, \"offset\": %d}.",
			t.Output.LogBytes, off, t.ID, off))
	}
	if !t.State.Final() {
		notes = append(notes, fmt.Sprintf("Task %s is still %s: it keeps going in the background. Follow it with read_task_output {\"task_id\": %q, \"offset\": %d} "+
			"(wait_seconds waits for more), or stop it with cancel_task.", t.ID, t.State, t.ID, off))
	}
	res.Note = strings.Join(notes, "\n")
	return res, nil
}

// text renders a RunResult for the model to read.
func (r RunResult) text() string {
	var b strings.Builder
	b.WriteString(r.summary())
	b.WriteByte('\n')
	if r.Stdout == "" && r.Stderr == "" {
		b.WriteString("(no output)\n")
	}
	for _, s := range [][2]string{{"stdout", r.Stdout}, {"stderr", r.Stderr}} {
		if s[1] == "" {
			continue
		}
		fmt.Fprintf(&b, "--- %s ---\n%s", s[0], s[1])
		if !strings.HasSuffix(s[1], "\n") {
			b.WriteByte('\n')
		}
	}
	if r.Note != "" {
		fmt.Fprintf(&b, "--- note ---\n%s\n", r.Note)
	}
	return b.String()
}

// summary is one line saying how a task ended, or where it is.
func (t TaskInfo) summary() string {
	took := ""
	if t.DurationSeconds > 0 {
		took = fmt.Sprintf(" after %gs", t.DurationSeconds)
	}
	switch {
	case t.ExitCode != nil && t.Reason != "":
		return fmt.Sprintf("exit code %d (task %s%s): %s", *t.ExitCode, t.TaskID, took, t.Reason)
	case t.ExitCode != nil:
		return fmt.Sprintf("exit code %d (task %s%s)", *t.ExitCode, t.TaskID, took)
	case t.Signal != "":
		s := fmt.Sprintf("%s by %s (task %s%s)", t.State, t.Signal, t.TaskID, took)
		if t.Reason != "" {
			s += ": " + t.Reason
		}
		return s
	case t.Reason != "":
		return fmt.Sprintf("%s (task %s%s): %s", t.State, t.TaskID, took, t.Reason)
	}
	return fmt.Sprintf("%s (task %s%s)", t.State, t.TaskID, took)
}

// clip keeps the first quarter and the last three quarters of a budget of
// one stream's bytes, and counts the rest.
type clip struct {
	headMax, tailMax int
	head, tail       []byte
	total            int64
	// spill is the log offset of the first record not wholly kept in head
	// (-1: none), where a reader finds the bytes left out.
	spill int64
	// marks locate head's records in the log, for a head cut shorter.
	marks []mark
}

type mark struct {
	pos int   // where in head the record's bytes start
	off int64 // the record's log offset
}

func newClip(limit int) *clip {
	return &clip{headMax: limit / 4, tailMax: limit - limit/4, spill: -1}
}

func (c *clip) add(ch tasks.Chunk) {
	d := ch.Data
	c.total += int64(len(d))
	if n := min(c.headMax-len(c.head), len(d)); n > 0 {
		c.marks = append(c.marks, mark{len(c.head), ch.Offset})
		c.head = append(c.head, d[:n]...)
		d = d[n:]
	}
	if len(d) == 0 {
		return
	}
	if c.spill < 0 {
		c.spill = ch.Offset
	}
	c.tail = append(c.tail, d...)
	if len(c.tail) > 2*c.tailMax {
		n := copy(c.tail, c.tail[len(c.tail)-c.tailMax:])
		c.tail = c.tail[:n]
	}
}

// text returns what is kept, with a marker where bytes were left out, how
// many were, and the log offset from which a reader finds them (-1: none
// left out). Cuts fall on UTF-8 character boundaries.
func (c *clip) text(id string) (string, int64, int64) {
	if c.total <= int64(c.headMax+c.tailMax) {
		return safeText(string(c.head) + string(c.tail)), 0, -1
	}
	head := c.head[:runeEnd(c.head)]
	tail := c.tail[max(0, len(c.tail)-c.tailMax):]
	// Whole lines read best: cut at a newline when one is near the cut.
	if i := bytes.LastIndexByte(head, '\n'); i >= len(head)/2 {
		head = head[:i+1]
	}
	if i := bytes.IndexByte(tail, '\n'); i >= 0 && i < len(tail)/4 {
		tail = tail[i+1:]
	}
	for i := 0; i < utf8.UTFMax && len(tail) > 0 && !utf8.RuneStart(tail[0]); i++ {
		tail = tail[1:]
	}
	omitted := c.total - int64(len(head)) - int64(len(tail))
	from := c.spill
	if len(head) < len(c.head) {
		// The cut went back into head's records: the gap starts in one of them.
		for _, m := range c.marks {
			if m.pos <= len(head) {
				from = m.off
			}
		}
	}
	marker := fmt.Sprintf("[… %d bytes left out here; read_task_output {\"task_id\": %q, \"offset\": %d} returns them …]\n", omitted, id, from)
	if len(head) > 0 && head[len(head)-1] != '\n' {
		marker = "\n" + marker
	}
	return safeText(string(head)) + marker + safeText(string(tail)), omitted, from
}

// safeText makes a task's output safe for a client to show on a terminal
// (agents such as Claude Code print tool results on one): every character
// a terminal acts on and every byte that is not UTF-8 is written as an
// escape (printable.String: \x1b, \r, \u009b, \u202e, \xff), except
// newlines and tabs, which keep the output's lines and columns. Escaping
// instead of replacing keeps what the bytes were for the agent to read.
func safeText(s string) string {
	plain := true
	for i := 0; i < len(s) && plain; i++ {
		plain = s[i] >= 0x20 && s[i] < 0x7f || s[i] == '\n' || s[i] == '\t'
	}
	if plain {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + len(s)/8)
	for {
		i := strings.IndexAny(s, "\n\t")
		if i < 0 {
			b.WriteString(printable.String(s))
			return b.String()
		}
		b.WriteString(printable.String(s[:i]))
		b.WriteByte(s[i])
		s = s[i+1:]
	}
}

// runeEnd returns the length of b without a UTF-8 sequence cut short at its end.
func runeEnd(b []byte) int {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return i
			}
			break
		}
	}
	return len(b)
}
