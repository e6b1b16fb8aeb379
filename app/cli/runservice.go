package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/app/api"
	"github.com/airlock-sandbox/airlock/app/service"
	"github.com/airlock-sandbox/airlock/app/tasks"
	"github.com/airlock-sandbox/airlock/internal/printable"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// vmShapingFlags need a VM of their own: with any of them, run boots an
// ephemeral VM even when a service is running.
var vmShapingFlags = []string{"workspace", "read-only", "tty", "cpus", "memory", "boot-timeout", "image-dir",
	"console-log", "kernel-arg", "allow", "deny", "map-host", "egress-log", "ephemeral",
	"upstream-ca", "upstream-proxy", "inspect", "image", "keep-disk", "changes"}

// useService returns a client of the running service when run can use it.
func useService(cmd *cobra.Command, g *globals) *api.Client {
	for _, name := range vmShapingFlags {
		if cmd.Flags().Changed(name) {
			return nil
		}
	}
	c, err := g.client(cmd.Context())
	if err != nil {
		return nil
	}
	return c
}

// runViaService runs the task on the service's warm VM, streams its log,
// and maps how it ended to the same exit codes as an ephemeral run.
func runViaService(ctx context.Context, stdio Stdio, c *api.Client, f runFlags, argv []string) error {
	req := service.RunRequest{Argv: argv, Env: f.env, Cwd: f.cwd, Root: f.root, Timeout: f.timeout, Secrets: f.secrets}
	if in, ok := stdio.In.(*os.File); !ok || !term.IsTerminal(int(in.Fd())) {
		b, err := io.ReadAll(io.LimitReader(stdio.In, service.MaxStdin+1))
		if err != nil {
			return fmt.Errorf("read stdin: %w", err)
		}
		if len(b) > service.MaxStdin {
			return fmt.Errorf("stdin is over %d MiB: run with --ephemeral to stream it", service.MaxStdin>>20)
		}
		if len(b) > 0 {
			req.Stdin = b
		}
	}
	// The service's events are followed from before the task exists, so
	// that none of its refusals or questions is missed.
	ectx, stopEvents := context.WithCancel(ctx)
	defer stopEvents()
	events, eventsErr := c.Events(ectx, false)
	t, err := c.Run(ctx, req)
	if err != nil {
		return err
	}
	report := newTaskReport(stdio.Err, t.ID)
	reported := make(chan struct{})
	go func() {
		defer close(reported)
		if eventsErr == nil {
			for e := range events {
				report.event(e)
			}
		}
	}()
	defer func() { stopEvents(); <-reported }()
	// endReport stops following and names the refusals the stream has
	// not delivered yet: the log has every decision the task caused.
	endReport := func() {
		stopEvents()
		<-reported
		if ds, err := c.EgressLog(ctx); err == nil {
			for _, d := range ds {
				report.event(service.Event{Kind: "egress", Egress: &d})
			}
		}
	}
	logs, err := c.FollowLogs(ctx, t.ID, 0)
	if err != nil {
		return serviceLost(ctx, c, t.ID, err)
	}
	for ch := range logs {
		writeChunk(stdio, ch)
	}
	bg := context.Background()
	if ctx.Err() != nil {
		_ = c.Cancel(bg, t.ID)
		wctx, cancel := context.WithTimeout(bg, 15*time.Second)
		defer cancel()
		_, _ = c.Wait(wctx, t.ID)
		fmt.Fprintf(stdio.Err, "airlock: interrupted; task %s was cancelled\n", t.ID)
		return exitError{code: 128 + int(syscall.SIGINT)}
	}
	id := t.ID
	if t, err = c.Wait(ctx, id); err != nil {
		return serviceLost(ctx, c, id, err)
	}
	endReport()
	// The service pulled what the task changed before it said the task
	// ended: say when some of it waits for review.
	if l, err := c.Changes(ctx); err == nil && len(l.Entries) > 0 {
		fmt.Fprintf(stdio.Err, "airlock: %d change(s) wait for review; see them with: airlock changes\n", len(l.Entries))
	}
	return taskExit(stdio, t, f.timeout)
}

// taskReport tells the user, on stderr, what the service's gate refused
// one task and which of its connections wait for an answer in the Airlock
// window: through the service the gate is not in this process, and the
// task itself often hides why its network failed.
type taskReport struct {
	task   string
	denied denialReport
	asked  map[string]bool // IDs of the questions told
	now    func() time.Time
}

func newTaskReport(w io.Writer, task string) *taskReport {
	return &taskReport{
		task: task, denied: denialReport{w: w, seen: map[string]bool{}, service: true},
		asked: map[string]bool{}, now: time.Now,
	}
}

func (r *taskReport) event(e service.Event) {
	switch {
	case e.Kind == "egress" && e.Egress != nil && e.Egress.Task == r.task:
		r.denied.add(*e.Egress)
	case e.Kind == "ask" && e.Ask != nil && e.Ask.Task == r.task && !r.asked[e.Ask.ID] && len(r.asked) < maxReported:
		// One line per question: what the task asks for while it waits is
		// added to it, and answered with it.
		r.asked[e.Ask.ID] = true
		left := min(max(service.AskTimeout-r.now().Sub(e.Ask.Time), 0), service.AskTimeout).Round(time.Second)
		dest := net.JoinHostPort(printable.String(e.Ask.Host), strconv.Itoa(int(e.Ask.Port)))
		fmt.Fprintf(r.denied.w, "airlock: egress: %s waits for an answer in the Airlock window (%s left)\n", dest, left)
	}
}

// serviceLost says, when err came from a service that no longer answers,
// that task id is lost with it: "no service" would read as if the task
// never ran.
func serviceLost(ctx context.Context, c *api.Client, id string, err error) error {
	if ctx.Err() != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if c.Ping(pctx) == nil {
		return err
	}
	return fmt.Errorf("task %s is lost: the Airlock service stopped while it ran (see airlock tasks once the service runs again)", id)
}

// taskExit maps a finished task to run's exit codes.
func taskExit(stdio Stdio, t tasks.Task, timeout time.Duration) error {
	switch t.State {
	case tasks.TimedOut:
		fmt.Fprintf(stdio.Err, "airlock: the task timed out after %s and was killed\n", timeout)
		return exitError{code: ExitTimedOut}
	case tasks.Lost:
		return errors.New("task " + t.ID + " was lost: " + t.Reason)
	case tasks.Killed:
		// Said on stderr: an exit code of 143 alone reads as the command's
		// own failure.
		if t.Reason == "" || t.Reason == "cancelled" {
			fmt.Fprintf(stdio.Err, "airlock: task %s was cancelled (airlock cancel)\n", t.ID)
		} else {
			fmt.Fprintf(stdio.Err, "airlock: task %s was ended: %s\n", t.ID, oneLine(t.Reason))
		}
		if t.Exit.Signal != 0 {
			return exitError{code: 128 + t.Exit.Signal}
		}
		return exitError{code: 128 + int(syscall.SIGKILL)}
	}
	if t.Reason != "" && (t.Exit.Code == ExitNotFound || t.Exit.Code == ExitNotRunnable || t.Exit.Code == ExitAirlockError) {
		fmt.Fprintf(stdio.Err, "airlock: %s\n", oneLine(t.Reason))
	}
	if t.Exit.Signal != 0 {
		return exitError{code: 128 + t.Exit.Signal}
	}
	if t.Exit.Code != 0 {
		return exitError{code: t.Exit.Code}
	}
	return nil
}
