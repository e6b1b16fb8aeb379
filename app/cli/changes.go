package cli

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"text/tabwriter"

	"github.com/airlock-sandbox/airlock/app/changes"
	"github.com/airlock-sandbox/airlock/app/service"
	"github.com/airlock-sandbox/airlock/app/settings"
	"github.com/airlock-sandbox/airlock/app/workspace"
	"github.com/airlock-sandbox/airlock/internal/printable"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// changesCore is what the change commands need: the service (service.Core
// has it), or one folder's held changes opened here with no VM
// (service.Held): what is applied or discarded then waits in the forget
// list for the next VM on the folder, and a layer with nothing pending
// left is wiped.
type changesCore interface {
	Changes(ctx context.Context) (service.ChangesList, error)
	Diff(ctx context.Context, paths []string, w io.Writer) error
	Apply(ctx context.Context, paths []string, force bool) (changes.ApplyResult, error)
	Discard(ctx context.Context, paths []string) ([]string, error)
	Checkpoints(ctx context.Context) (service.CheckpointList, error)
	Undo(ctx context.Context, id string) (changes.Checkpoint, error)
}

// changesFlags are the flags every change command takes.
type changesFlags struct {
	workspace string
}

func (f *changesFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&f.workspace, "workspace", "w", "", "the folder of an 'airlock run --workspace DIR' (default: the service's workspace)")
}

// open returns the changes of --workspace (opened here, closed by done)
// or the service's, and the workspace's canonical path.
func (f *changesFlags) open(ctx context.Context, stdio Stdio, g *globals) (c changesCore, ws string, done func(), err error) {
	if f.workspace == "" {
		cl, err := g.client(ctx)
		if err != nil {
			return nil, "", nil, fmt.Errorf("%w (or name the folder of an ephemeral run: --workspace DIR)", err)
		}
		st, err := cl.Status(ctx)
		if err != nil {
			return nil, "", nil, err
		}
		return cl, st.Settings.Workspace, func() {}, nil
	}
	host, err := workspace.Local(runtime.GOOS)
	if err != nil {
		return nil, "", nil, err
	}
	if ws, err = host.Validate(absPath(f.workspace)); err != nil {
		return nil, "", nil, err
	}
	state, err := stateDir()
	if err != nil {
		return nil, "", nil, err
	}
	h, err := service.OpenHeld(state, ws, folderMode(ws))
	if err != nil {
		return nil, "", nil, err
	}
	h.Log = warnLog(stdio)
	return h, ws, func() { h.Close() }, nil
}

// warnLog logs warnings to stderr, without the time a terminal's reader
// has.
func warnLog(stdio Stdio) *slog.Logger {
	return slog.New(slog.NewTextHandler(stdio.Err, &slog.HandlerOptions{
		Level: slog.LevelWarn,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
}

// folderMode is the changes mode the settings give folder ws (auto when
// they give none or cannot be read: only shown, never acted on).
func folderMode(ws string) changes.Mode {
	p, err := settings.DefaultPath()
	if err != nil {
		return changes.Auto
	}
	st, err := settings.Load(p, settings.Validators{})
	if err != nil {
		return changes.Auto
	}
	return st.ChangesMode(ws)
}

// relPaths makes the paths a user typed relative to the workspace: a
// path of the folder on the host, or one relative to it ("./a", "a/").
func relPaths(ws string, args []string) []string {
	out := make([]string, 0, len(args))
	for _, a := range args {
		if filepath.IsAbs(a) && ws != "" {
			if r, err := filepath.Rel(ws, a); err == nil && r != ".." && !strings.HasPrefix(r, ".."+string(filepath.Separator)) {
				a = r
			}
		}
		out = append(out, strings.TrimPrefix(path.Clean(filepath.ToSlash(a)), "./"))
	}
	return out
}

func newChangesCmds(stdio Stdio, g *globals) []*cobra.Command {
	return []*cobra.Command{newChangesCmd(stdio, g), newDiffCmd(stdio, g), newApplyCmd(stdio, g),
		newDiscardCmd(stdio, g), newCheckpointsCmd(stdio, g), newUndoCmd(stdio, g)}
}

func newChangesCmd(stdio Stdio, g *globals) *cobra.Command {
	var f changesFlags
	cmd := &cobra.Command{
		Use:   "changes",
		Short: "List the changes tasks made that wait for review (review and auto modes)",
		Long: `In review mode nothing a task writes reaches the folder until you apply it; in
auto mode what tasks wrote is applied once no task runs, except conflicts (you
changed the file too) and files your tools run (.git/config, .envrc, ...),
which wait here. Each line: kind, path, size, lines added/removed for text.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, ws, done, err := f.open(cmd.Context(), stdio, g)
			if err != nil {
				return err
			}
			defer done()
			l, err := c.Changes(cmd.Context())
			if err != nil {
				return err
			}
			if g.json {
				for i := range l.Entries {
					l.Entries[i].Path, l.Entries[i].From = printable.String(l.Entries[i].Path), printable.String(l.Entries[i].From)
					l.Entries[i].Link = printable.String(l.Entries[i].Link)
				}
				if l.Entries == nil {
					l.Entries = []changes.Entry{}
				}
				return printJSON(stdio.Out, l)
			}
			writeChanges(stdio.Out, l, ws, f.workspace != "")
			return nil
		},
	}
	f.add(cmd)
	return cmd
}

// writeChanges prints l as `airlock changes` shows it.
func writeChanges(w io.Writer, l service.ChangesList, ws string, named bool) {
	if len(l.Entries) == 0 {
		fmt.Fprintf(w, "no changes wait (%s mode)\n", l.Mode)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tPATH\tSIZE\tLINES\tNOTE")
	for _, e := range l.Entries {
		p := printable.String(e.Path)
		if e.Kind == changes.Renamed && e.From != "" {
			p = printable.String(e.From) + " -> " + p
		}
		size, lines := "-", "-"
		if e.Kind != changes.Deleted && e.Type == changes.File {
			size = sizeText(e.Size)
			if e.Text {
				lines = fmt.Sprintf("+%d -%d", e.LinesAdded, e.LinesRemoved)
			} else {
				lines = "binary"
			}
		}
		var notes []string
		if e.Conflict {
			notes = append(notes, "conflict: you changed it too")
		}
		if e.HostRuns {
			notes = append(notes, "your tools run it")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.Kind, p, size, lines, strings.Join(notes, "; "))
	}
	tw.Flush()
	flag := ""
	if named {
		flag = " --workspace " + printable.String(ws)
	}
	fmt.Fprintf(w, "%d change(s) wait (%s mode): airlock diff%s to see them, airlock apply%s to apply, airlock discard%s to drop\n",
		len(l.Entries), l.Mode, flag, flag, flag)
}

func sizeText(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

func newDiffCmd(stdio Stdio, g *globals) *cobra.Command {
	var f changesFlags
	cmd := &cobra.Command{
		Use:   "diff [PATH...]",
		Short: "Show the pending changes as a unified diff (all, or those PATHs)",
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ws, done, err := f.open(cmd.Context(), stdio, g)
			if err != nil {
				return err
			}
			defer done()
			out := stdio.Out
			if isTerminal(out) {
				// What the guest wrote, names and content, reaches a terminal
				// only escaped; piped, the diff stays exact for patch(1).
				pw := newPrintableWriter(out)
				defer pw.Flush()
				out = pw
			}
			return c.Diff(cmd.Context(), relPaths(ws, args), out)
		},
	}
	f.add(cmd)
	return cmd
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// printableWriter escapes each line as printable.String does, keeping its
// tabs and its line break.
type printableWriter struct {
	w   *bufio.Writer
	buf []byte
}

func newPrintableWriter(w io.Writer) *printableWriter {
	return &printableWriter{w: bufio.NewWriter(w)}
}

func (p *printableWriter) Write(b []byte) (int, error) {
	p.buf = append(p.buf, b...)
	for {
		i := strings.IndexByte(string(p.buf), '\n')
		if i < 0 {
			break
		}
		p.line(string(p.buf[:i]))
		p.w.WriteByte('\n')
		p.buf = p.buf[i+1:]
	}
	if len(p.buf) > 64<<10 { // a line without end is shown in pieces
		p.line(string(p.buf))
		p.buf = p.buf[:0]
	}
	return len(b), nil
}

func (p *printableWriter) line(s string) {
	parts := strings.Split(s, "\t")
	for i, part := range parts {
		if i > 0 {
			p.w.WriteByte('\t')
		}
		p.w.WriteString(printable.String(part))
	}
}

// Flush writes what is left.
func (p *printableWriter) Flush() error {
	if len(p.buf) > 0 {
		p.line(string(p.buf))
		p.buf = nil
	}
	return p.w.Flush()
}

func newApplyCmd(stdio Stdio, g *globals) *cobra.Command {
	var f changesFlags
	var force bool
	cmd := &cobra.Command{
		Use:   "apply [PATH...]",
		Short: "Apply pending changes to the folder (all, or those PATHs), as one checkpoint airlock undo takes back",
		Long: `Applies the pending changes to the folder on this computer. What each change
overwrites or deletes is kept in a checkpoint: airlock undo restores it exactly.
A change to a file you edited yourself after the task could first have seen it
is a conflict: it stays pending and your file stays as it is; --force applies
it anyway (your version goes into the checkpoint).`,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ws, done, err := f.open(cmd.Context(), stdio, g)
			if err != nil {
				return err
			}
			defer done()
			res, err := c.Apply(cmd.Context(), relPaths(ws, args), force)
			if err != nil {
				return err
			}
			if g.json {
				if err := printJSON(stdio.Out, res); err != nil {
					return err
				}
			} else {
				writeApply(stdio.Out, res)
			}
			if len(res.Conflicts)+len(res.Refused) > 0 {
				return exitError{code: 1}
			}
			return nil
		},
	}
	f.add(cmd)
	cmd.Flags().BoolVar(&force, "force", false, "apply conflicting changes too (your version is kept in the checkpoint)")
	return cmd
}

func writeApply(w io.Writer, res changes.ApplyResult) {
	if len(res.Applied) == 0 {
		fmt.Fprintln(w, "nothing applied")
	} else {
		fmt.Fprintf(w, "applied %d path(s), checkpoint %s (airlock undo %s takes it back)\n", len(res.Applied), printable.String(res.Checkpoint), printable.String(res.Checkpoint))
	}
	for _, p := range res.Conflicts {
		fmt.Fprintf(w, "conflict: %s: you changed it after the task saw it; both versions kept (airlock diff %s; airlock apply --force %s replaces yours)\n",
			printable.String(p), printable.String(p), printable.String(p))
	}
	for _, r := range res.Refused {
		fmt.Fprintf(w, "refused: %s: %s\n", printable.String(r.Path), printable.String(r.Reason))
	}
}

func newDiscardCmd(stdio Stdio, g *globals) *cobra.Command {
	var f changesFlags
	cmd := &cobra.Command{
		Use:   "discard [PATH...]",
		Short: "Drop pending changes (all, or those PATHs); the folder keeps its own version",
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ws, done, err := f.open(cmd.Context(), stdio, g)
			if err != nil {
				return err
			}
			defer done()
			gone, err := c.Discard(cmd.Context(), relPaths(ws, args))
			if err != nil {
				return err
			}
			if g.json {
				if gone == nil {
					gone = []string{}
				}
				return printJSON(stdio.Out, map[string][]string{"discarded": gone})
			}
			fmt.Fprintf(stdio.Out, "discarded %d change(s)\n", len(gone))
			return nil
		},
	}
	f.add(cmd)
	return cmd
}

func newCheckpointsCmd(stdio Stdio, g *globals) *cobra.Command {
	var f changesFlags
	cmd := &cobra.Command{
		Use:   "checkpoints",
		Short: "List the applied changes airlock undo can take back, newest first, and the space they use",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, _, done, err := f.open(cmd.Context(), stdio, g)
			if err != nil {
				return err
			}
			defer done()
			l, err := c.Checkpoints(cmd.Context())
			if err != nil {
				return err
			}
			if g.json {
				if l.Checkpoints == nil {
					l.Checkpoints = []changes.Checkpoint{}
				}
				return printJSON(stdio.Out, l)
			}
			tw := tabwriter.NewWriter(stdio.Out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tTIME\tKEPT\tCHANGES")
			for _, cp := range l.Checkpoints {
				summary := printable.String(cp.Summary)
				if cp.Undone {
					summary += " (undone)"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", printable.String(cp.ID), cp.Time.Local().Format("01-02 15:04:05"), sizeText(cp.Bytes), summary)
			}
			tw.Flush()
			u := l.Usage
			fmt.Fprintf(stdio.Out, "space: %s pending, %s in checkpoints, of %s (the oldest checkpoints go first)\n",
				sizeText(u.PendingBytes), sizeText(u.CheckpointBytes), sizeText(u.LimitBytes))
			return nil
		},
	}
	f.add(cmd)
	return cmd
}

func newUndoCmd(stdio Stdio, g *globals) *cobra.Command {
	var f changesFlags
	cmd := &cobra.Command{
		Use:   "undo [CHECKPOINT]",
		Short: "Restore the folder to before a checkpoint (default: the newest not undone): bytes, modes and times",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, _, done, err := f.open(cmd.Context(), stdio, g)
			if err != nil {
				return err
			}
			defer done()
			id := ""
			if len(args) == 1 {
				id = args[0]
			}
			cp, err := c.Undo(cmd.Context(), id)
			if err != nil {
				return err
			}
			if g.json {
				return printJSON(stdio.Out, cp)
			}
			fmt.Fprintf(stdio.Out, "undone checkpoint %s (%s): %d path(s) restored\n", printable.String(cp.ID), printable.String(cp.Summary), len(cp.Paths))
			return nil
		},
	}
	f.add(cmd)
	return cmd
}
