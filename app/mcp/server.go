package mcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/airlock-sandbox/airlock/app/service"
	"github.com/airlock-sandbox/airlock/app/tasks"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Options tunes the server; the zero value is usable.
type Options struct {
	// Version is reported to clients as the server's version ("dev" when empty).
	Version string
	// Logger receives the SDK's and the server's diagnostics; nil discards them.
	Logger *slog.Logger
	// DefaultTimeout bounds run_command when the agent gives no timeout
	// (default 120 s); MaxTimeout is the most an agent may ask of
	// run_command (default 1 h) and start_task (four times that).
	DefaultTimeout, MaxTimeout time.Duration
	// WaitMargin is how much longer than its timeout run_command waits for a
	// task, to cover a VM boot while it is queued (default 60 s). After
	// that the task is left running and the reply says how to follow it.
	WaitMargin time.Duration
	// OutputLimit is the bytes of each stream run_command returns before it
	// cuts the middle out (default 32 KiB).
	OutputLimit int
	// MaxStdin bounds the stdin text of a task (default and at most
	// service.MaxStdin).
	MaxStdin int
	// ProgressEvery is how often run_command looks at its task to send the
	// client progress, when the client asked for it (default 1 s).
	ProgressEvery time.Duration
	// Unavailable is the error the core wraps when the service behind it
	// is not running (app/api's ErrNotRunning for a control API client);
	// a tool that fails with it tells the agent to ask the user to start
	// Airlock. Nil when the core runs in this process.
	Unavailable error
}

// Defaults and bounds of Options and of tool inputs.
const (
	DefaultTimeout     = 120 * time.Second
	DefaultMaxTimeout  = time.Hour
	DefaultWaitMargin  = 60 * time.Second
	DefaultOutputLimit = 32 << 10
	// DefaultProgressEvery is Options.ProgressEvery's default.
	DefaultProgressEvery = time.Second
	// maxScan bounds how much of a log run_command reads to find the tail of
	// a huge output; past it the reply points to read_task_output.
	maxScan = 256 << 20
	// cancelTimeout bounds the Cancel sent when a request is abandoned.
	cancelTimeout = 10 * time.Second
)

func (o Options) withDefaults() Options {
	if o.Version == "" {
		o.Version = "dev"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.DefaultTimeout <= 0 {
		o.DefaultTimeout = DefaultTimeout
	}
	if o.MaxTimeout <= 0 {
		o.MaxTimeout = DefaultMaxTimeout
	}
	o.DefaultTimeout = min(o.DefaultTimeout, o.MaxTimeout)
	if o.WaitMargin <= 0 {
		o.WaitMargin = DefaultWaitMargin
	}
	if o.OutputLimit <= 0 {
		o.OutputLimit = DefaultOutputLimit
	}
	o.OutputLimit = max(o.OutputLimit, 256)
	if o.ProgressEvery <= 0 {
		o.ProgressEvery = DefaultProgressEvery
	}
	if o.MaxStdin <= 0 || o.MaxStdin > service.MaxStdin {
		o.MaxStdin = service.MaxStdin
	}
	return o
}

// instructions tell the agent what the sandbox is, once, at initialisation.
const instructions = `Airlock runs commands in a disposable Linux VM that sees exactly one folder of the user's: it is mounted at /workspace (the default working directory). Tasks run as the unprivileged user "agent" (uid 1000) unless root is set. The VM has no network card: HTTP(S) and SOCKS proxies are set in every task's environment, and each connection is allowed or refused by the user's allowlist on the host.
Use run_command for commands that finish within minutes; use start_task and then read_task_output for servers, long builds and anything that runs longer. If a download or request fails, call egress_log with denied_only to see which host was refused and why, and ask the user to allow it: no tool here can change the allowlist, the workspace or the VM.`

// NewServer returns an MCP server whose tools call core. Run it on any
// transport of the SDK (server.Run(ctx, transport)); Serve does that on a
// pair of streams.
func NewServer(core service.Core, opts Options) *sdk.Server {
	opts = opts.withDefaults()
	srv := sdk.NewServer(&sdk.Implementation{Name: "airlock", Title: "Airlock sandbox", Version: opts.Version},
		&sdk.ServerOptions{Instructions: instructions, Logger: opts.Logger, Capabilities: &sdk.ServerCapabilities{}})
	h := &handlers{core: core, opts: opts}
	h.register(srv)
	return srv
}

// Serve runs the MCP server over newline-delimited JSON-RPC on in and out
// (os.Stdin and os.Stdout for `airlock mcp`) until the client disconnects
// or ctx is done. in and out are closed on return when they are Closers.
// The frame limit admits a request carrying Options.MaxStdin of stdin. A
// request the client cancels gets no response (see cancelFilter).
func Serve(ctx context.Context, core service.Core, in io.Reader, out io.Writer, opts Options) error {
	opts = opts.withDefaults()
	rc, ok := in.(io.ReadCloser)
	if !ok {
		rc = io.NopCloser(in)
	}
	wc, ok := out.(io.WriteCloser)
	if !ok {
		wc = nopWriteCloser{out}
	}
	var f cancelFilter
	t := &sdk.IOTransport{Reader: f.reader(rc), Writer: f.writer(wc), MaxLineLength: max(2*opts.MaxStdin+(1<<20), sdk.DefaultMaxLineLength)}
	err := NewServer(core, opts).Run(ctx, t)
	if err != nil && (errors.Is(err, io.EOF) || ctx.Err() != nil) {
		return nil
	}
	return err
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// handlers holds what every tool handler needs.
type handlers struct {
	core service.Core
	opts Options
}

func ptr[T any](v T) *T { return &v }

// register adds every tool. Nothing here may change settings or the VM:
// see the package doc.
func (h *handlers) register(s *sdk.Server) {
	closed := ptr(false) // the tools touch the sandbox and the host's records only
	readOnly := &sdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: closed}
	addTool(s, h, &sdk.Tool{
		Name:  "run_command",
		Title: "Run a command in the sandbox",
		Description: "Run a command in the Airlock Linux sandbox and wait for it to finish; returns the exit code and its stdout and stderr. " +
			"The user's folder is at /workspace (the default cwd). Give argv (run directly) or command (a /bin/sh -c line). " +
			"timeout_seconds defaults to " + seconds(h.opts.DefaultTimeout) + " and may be at most " + seconds(h.opts.MaxTimeout) + "; " +
			"a task that runs over it is killed (state timed-out). Output over " + fmt.Sprint(h.opts.OutputLimit) + " bytes per stream is cut in the middle, " +
			"with a note saying how to read all of it (read_task_output). For servers and jobs longer than a few minutes use start_task.",
		Annotations: &sdk.ToolAnnotations{Title: "Run a command", DestructiveHint: ptr(true), OpenWorldHint: ptr(true)},
	}, h.runCommand)
	addTool(s, h, &sdk.Tool{
		Name:  "start_task",
		Title: "Start a background task",
		Description: "Start a command in the sandbox and return its task id at once, without waiting: for servers, long builds and test suites. " +
			"Same inputs as run_command; timeout_seconds defaults to " + seconds(h.opts.MaxTimeout) + " and may be at most " + seconds(4*h.opts.MaxTimeout) + ". " +
			"Follow it with read_task_output (offset 0, then each reply's next_offset), stop it with cancel_task.",
		Annotations: &sdk.ToolAnnotations{Title: "Start a task", DestructiveHint: ptr(true), OpenWorldHint: ptr(true)},
	}, h.startTask)
	addTool(s, h, &sdk.Tool{
		Name:  "read_task_output",
		Title: "Read a task's output",
		Description: "Read a task's stdout and stderr from a log offset: 0 for the start, then the next_offset of the previous reply. " +
			"Returns stream-tagged text in order, next_offset, whether more output is already waiting (more), and whether the task finished (with its exit). " +
			"wait_seconds (at most 60) waits for new output when there is none yet, instead of polling quickly.",
		Annotations: &sdk.ToolAnnotations{Title: "Read task output", ReadOnlyHint: true, OpenWorldHint: closed},
	}, h.readTaskOutput)
	addTool(s, h, &sdk.Tool{
		Name:        "task_status",
		Title:       "Task status",
		Description: "Show one task: its command, state (queued, running, exited, killed, timed-out, lost), exit code or signal, timings and output sizes.",
		Annotations: &sdk.ToolAnnotations{Title: "Task status", ReadOnlyHint: true, OpenWorldHint: closed},
	}, h.taskStatus)
	addTool(s, h, &sdk.Tool{
		Name:        "list_tasks",
		Title:       "List tasks",
		Description: "List recent tasks, newest first (at most 100), optionally only those still queued or running.",
		Annotations: readOnly,
	}, h.listTasks)
	addTool(s, h, &sdk.Tool{
		Name:        "cancel_task",
		Title:       "Cancel a task",
		Description: "Stop a queued or running task: SIGTERM to its process group, then SIGKILL after a grace period. Returns the task as it is after the request.",
		Annotations: &sdk.ToolAnnotations{Title: "Cancel a task", DestructiveHint: ptr(true), IdempotentHint: true, OpenWorldHint: closed},
	}, h.cancelTask)
	addTool(s, h, &sdk.Tool{
		Name:  "sandbox_status",
		Title: "Sandbox status",
		Description: "Show the sandbox: the VM's state, the workspace (/workspace in the sandbox, and the user's folder it is), whether it is read-only, " +
			"CPUs and memory, and the hosts the egress allowlist allows and denies. Read-only: only the user can change these.",
		Annotations: readOnly,
	}, h.sandboxStatus)
	addTool(s, h, &sdk.Tool{
		Name:  "egress_log",
		Title: "Egress log",
		Description: "Show recent network decisions of the sandbox's egress gate, oldest first and newest last: host, port, allowed or denied, and why. " +
			"Use denied_only after a failed download or request to find the host that was refused, then ask the user to allow it (you cannot).",
		Annotations: readOnly,
	}, h.egressLog)
	addTool(s, h, &sdk.Tool{
		Name:  "list_changes",
		Title: "List pending changes",
		Description: "List what tasks changed in /workspace that waits for the user's review (review and auto modes hold changes until the user applies them): " +
			"path, kind (added, modified, deleted, renamed, mode), size, lines added and removed. Use it to tell the user what you changed. " +
			"Read-only: only the user can apply, discard or undo changes.",
		Annotations: readOnly,
	}, h.listChanges)
}

// addTool adds a tool whose errors, when they come from a service that is
// not running, also say what the agent can do about it: nothing but ask
// the user, since no tool starts Airlock.
func addTool[In, Out any](s *sdk.Server, h *handlers, t *sdk.Tool, f sdk.ToolHandlerFor[In, Out]) {
	sdk.AddTool(s, t, func(ctx context.Context, req *sdk.CallToolRequest, in In) (*sdk.CallToolResult, Out, error) {
		res, out, err := f(ctx, req, in)
		if err != nil && h.opts.Unavailable != nil && errors.Is(err, h.opts.Unavailable) {
			err = fmt.Errorf("%w. Ask the user to start Airlock (open the desktop app, or run `airlock serve`), "+
				"then call %s again; no tool here can start it", err, t.Name)
		}
		return res, out, err
	})
}

func seconds(d time.Duration) string { return fmt.Sprintf("%d seconds", int64(d/time.Second)) }

// taskError turns a core error about a task into text an agent can act on.
func taskError(op, id string, err error) error {
	switch {
	case errors.Is(err, tasks.ErrNotFound):
		return fmt.Errorf("%s: no task %q: it never existed or was dropped from the history; list_tasks shows the known ones", op, id)
	case errors.Is(err, tasks.ErrOffset):
		return fmt.Errorf("%s: %w: pass 0 or a next_offset returned by an earlier call for task %s", op, err, id)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return fmt.Errorf("%s: %w", op, err)
	}
	return fmt.Errorf("%s %s: %w", op, id, err)
}
