package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/airlock-sandbox/airlock/app/changes"
	"github.com/airlock-sandbox/airlock/app/egress"
	"github.com/airlock-sandbox/airlock/app/service"
	"github.com/airlock-sandbox/airlock/app/tasks"
	"github.com/airlock-sandbox/airlock/internal/printable"
	"github.com/spf13/cobra"
)

// nonNil makes an empty listing print as [] in JSON, not null.
func nonNil[T any](l []T) []T {
	if l == nil {
		return []T{}
	}
	return l
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func newStatusCmd(stdio Stdio, g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "status", Short: "Show the service's VM, workspace and tasks", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			st, err := c.Status(cmd.Context())
			if err != nil {
				return err
			}
			if g.json {
				return printJSON(stdio.Out, st)
			}
			writeStatus(stdio.Out, st)
			return nil
		},
	}
}

// writeStatus prints st the way `airlock status` shows it.
func writeStatus(w io.Writer, st service.Status) {
	s := st.Session
	ws := s.Workspace
	if ws == "" {
		ws = "(none)"
	} else if s.ReadOnly {
		ws += " (read-only)"
	} else {
		ws += " (changes " + string(st.Settings.ChangesMode(s.Workspace)) + ")"
	}
	fmt.Fprintf(w, "vm:        %s", s.State)
	if s.Phase != "" {
		fmt.Fprintf(w, " (%s, %s)", s.Phase, s.Elapsed.Round(100*time.Millisecond))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "workspace: %s\n", ws)
	image := orDash(s.Image)
	if s.Kernel != "" {
		image += ", kernel " + s.Kernel
	}
	fmt.Fprintf(w, "image:     %s%s\n", image, map[bool]string{true: " (changes kept on the workspace's disk)"}[s.KeepDisk])
	accel := orDash(s.Accelerator)
	if s.MachineType != "" {
		accel += " on " + s.MachineType
	}
	fmt.Fprintf(w, "machine:   %d CPUs, %d MiB, %s, generation %d, booted in %s, up %s\n",
		s.CPUs, s.MemoryMiB, accel, s.Generation, s.BootTime.Round(time.Millisecond), s.Uptime.Round(time.Second))
	fmt.Fprintf(w, "tasks:     %d running\n", st.RunningTasks)
	fmt.Fprintf(w, "egress:    allow %s; deny %s\n", list(st.Settings.Allow), list(st.Settings.Deny))
	if s.LastError != "" {
		fmt.Fprintf(w, "last error: %s\n", oneLine(s.LastError))
	}
	fmt.Fprintf(w, "data:      %s\nconsole:   %s\n", st.StateDir, orDash(s.ConsoleLog))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func list(l []string) string {
	if len(l) == 0 {
		return "(none)"
	}
	return strings.Join(l, " ")
}

func newVMCmd(stdio Stdio, g *globals, action, short string) *cobra.Command {
	return &cobra.Command{
		Use: action, Short: short, Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			switch action {
			case "start":
				err = c.StartVM(cmd.Context())
			case "stop":
				err = c.StopVM(cmd.Context())
			case "restart":
				err = c.RestartVM(cmd.Context())
			}
			if err != nil {
				return err
			}
			st, err := c.Status(cmd.Context())
			if err != nil {
				return err
			}
			if g.json {
				return printJSON(stdio.Out, st)
			}
			fmt.Fprintf(stdio.Out, "vm: %s\n", st.Session.State)
			return nil
		},
	}
}

func newTasksCmd(stdio Stdio, g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "tasks", Short: "List tasks, oldest first", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			ts, err := c.Tasks(cmd.Context())
			if err != nil {
				return err
			}
			if g.json {
				return printJSON(stdio.Out, nonNil(ts))
			}
			tw := tabwriter.NewWriter(stdio.Out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATE\tEXIT\tCREATED\tCOMMAND")
			for _, t := range ts {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.ID, t.State, exitText(t), t.Created.Local().Format("01-02 15:04:05"), commandText(t.Command))
			}
			return tw.Flush()
		},
	}
}

func exitText(t tasks.Task) string {
	switch {
	case !t.State.Final() || t.State == tasks.Lost:
		return "-"
	case t.Exit.Signal != 0:
		return fmt.Sprintf("signal %d", t.Exit.Signal)
	}
	return fmt.Sprint(t.Exit.Code)
}

func commandText(c tasks.Command) string {
	s := c.Shell
	if s == "" {
		s = strings.Join(c.Argv, " ")
	}
	if len(s) > 60 {
		s = strings.ToValidUTF8(s[:57], "") + "..."
	}
	return printable.String(s)
}

// printableDecision escapes what the guest chose in d (the host name it
// asked for, and the rule and detail that may quote it), for a terminal:
// JSON escapes C0 controls but passes DEL, C1 controls and bidi marks.
func printableDecision(d egress.Decision) egress.Decision {
	d.Host, d.Task = printable.String(d.Host), printable.String(d.Task)
	d.Rule, d.Detail = printable.String(d.Rule), printable.String(d.Detail)
	return d
}

func newLogsCmd(stdio Stdio, g *globals) *cobra.Command {
	var followFlag bool
	cmd := &cobra.Command{
		Use: "logs ID", Short: "Print a task's output (stdout to stdout, stderr to stderr)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			if followFlag {
				ch, err := c.FollowLogs(cmd.Context(), args[0], 0)
				if err != nil {
					return taskErr(args[0], err)
				}
				for ch := range ch {
					writeChunk(stdio, ch)
				}
				return nil
			}
			for off := int64(0); ; {
				chunks, next, err := c.Logs(cmd.Context(), args[0], off)
				if err != nil {
					return taskErr(args[0], err)
				}
				for _, ch := range chunks {
					writeChunk(stdio, ch)
				}
				if next == off || len(chunks) == 0 {
					return nil
				}
				off = next
			}
		},
	}
	cmd.Flags().BoolVarP(&followFlag, "follow", "f", false, "keep printing output until the task ends")
	return cmd
}

// taskErr names the task the user asked for when the service knows no
// such task, and where to find the ones it knows.
func taskErr(id string, err error) error {
	if errors.Is(err, tasks.ErrNotFound) {
		return fmt.Errorf("no task %s (see airlock tasks)", printable.String(id))
	}
	return err
}

func writeChunk(stdio Stdio, c tasks.Chunk) {
	if c.Stream == tasks.Stderr {
		stdio.Err.Write(c.Data)
		return
	}
	stdio.Out.Write(c.Data)
}

func newCancelCmd(stdio Stdio, g *globals) *cobra.Command {
	return &cobra.Command{
		Use: "cancel ID", Short: "Cancel a running task (SIGTERM, then SIGKILL after a grace period)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			if err := c.Cancel(cmd.Context(), args[0]); err != nil {
				return taskErr(args[0], err)
			}
			if g.json {
				t, err := c.Task(cmd.Context(), args[0])
				if err != nil {
					return taskErr(args[0], err)
				}
				return printJSON(stdio.Out, t)
			}
			fmt.Fprintf(stdio.Out, "cancelling %s\n", args[0])
			return nil
		},
	}
}

func newEgressCmd(stdio Stdio, g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "egress", Short: "See and change what the sandbox may connect to"}
	var followFlag, deniedOnly bool
	logCmd := &cobra.Command{
		Use: "log", Short: "Show connection decisions (newest last)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			show := func(d egress.Decision) {
				if deniedOnly && d.Action != egress.ActionDeny {
					return
				}
				d = printableDecision(d)
				if g.json {
					b, _ := json.Marshal(d)
					fmt.Fprintf(stdio.Out, "%s\n", b)
					return
				}
				fmt.Fprintf(stdio.Out, "%s  %-5s %-7s %s:%d  %s  task %s  ↑%d ↓%d%s\n", d.Time.Local().Format("15:04:05"),
					d.Action, d.Protocol, d.Host, d.Port, d.Reason, orDash(d.Task), d.BytesUp, d.BytesDown, repeatedText(d))
			}
			if followFlag {
				ch, err := c.FollowEgress(cmd.Context())
				if err != nil {
					return err
				}
				for d := range ch {
					show(d)
				}
				return nil
			}
			ds, err := c.EgressLog(cmd.Context())
			if err != nil {
				return err
			}
			if g.json {
				shown := []egress.Decision{}
				for _, d := range ds {
					if !deniedOnly || d.Action == egress.ActionDeny {
						shown = append(shown, printableDecision(d))
					}
				}
				return printJSON(stdio.Out, shown)
			}
			for _, d := range ds {
				show(d)
			}
			return nil
		},
	}
	logCmd.Flags().BoolVarP(&followFlag, "follow", "f", false, "keep printing decisions as they are made")
	logCmd.Flags().BoolVar(&deniedOnly, "denied", false, "only refused connections")
	cmd.AddCommand(logCmd)
	for _, action := range []string{"allow", "deny", "remove"} {
		cmd.AddCommand(&cobra.Command{
			Use: action + " PATTERN", Short: ruleShort[action], Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				c, err := g.client(cmd.Context())
				if err != nil {
					return err
				}
				st, err := c.EgressRule(cmd.Context(), action, args[0])
				if err != nil {
					return err
				}
				if g.json {
					return printJSON(stdio.Out, map[string][]string{"allow": st.Allow, "deny": st.Deny})
				}
				fmt.Fprintf(stdio.Out, "allow: %s\ndeny:  %s\n", list(st.Allow), list(st.Deny))
				return nil
			},
		})
	}
	return cmd
}

// repeatedText marks a summary of identical refusals with its count.
func repeatedText(d egress.Decision) string {
	if d.Repeated == 0 {
		return ""
	}
	return fmt.Sprintf("  ×%d more in %s", d.Repeated, d.Duration.Round(time.Second))
}

var ruleShort = map[string]string{
	"allow":  "Allow connections to HOST, *.DOMAIN, an address or CIDR, optionally :PORT",
	"deny":   "Refuse connections to PATTERN (wins over allow)",
	"remove": "Remove PATTERN from the allow and deny lists",
}

func newWorkspaceCmd(stdio Stdio, g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "workspace", Short: "Choose the folder the sandbox sees"}
	var readOnly bool
	var mode string
	set := &cobra.Command{
		Use: "set DIR", Short: "Share DIR at /workspace (the VM restarts on it)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if mode != "" {
				if _, err := changes.ParseMode(mode); err != nil {
					return fmt.Errorf("--changes: %w", err)
				}
			}
			c, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Minute)
			defer cancel()
			if err := c.SetWorkspace(ctx, absPath(args[0]), readOnly, changes.Mode(mode)); err != nil {
				return err
			}
			st, err := c.Status(ctx)
			if err != nil {
				return err
			}
			if g.json {
				return printJSON(stdio.Out, st)
			}
			how := "changes " + string(st.Settings.ChangesMode(st.Session.Workspace))
			if st.Session.ReadOnly {
				how = "read-only"
			}
			fmt.Fprintf(stdio.Out, "workspace: %s (%s, vm %s)\n", st.Session.Workspace, how, st.Session.State)
			return nil
		},
	}
	set.Flags().BoolVar(&readOnly, "read-only", false, "share it read-only")
	set.Flags().StringVar(&mode, "changes", "", "how the folder takes what tasks write: direct (at once), review (you apply), auto (applied when no task runs, undoable); default: the folder's mode, auto for a new one")
	cmd.AddCommand(set)
	cmd.AddCommand(newResetDiskCmd(stdio, g))
	return cmd
}
