// Package cli is the `airlock` command line: a thin adapter that parses
// flags, calls the host core and maps outcomes to exit codes. It holds no
// policy of its own.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/airlock-sandbox/airlock/app/service"
	"github.com/airlock-sandbox/airlock/internal/printable"
	"github.com/spf13/cobra"
)

// Exit codes of Airlock itself; a task's own code passes through unchanged.
const (
	ExitAirlockError = 125 // Airlock could not run the task
	ExitNotRunnable  = 126 // the command exists but cannot be run
	ExitNotFound     = 127 // the command does not exist
	ExitTimedOut     = 124 // the task hit its --timeout
)

// Version is Airlock's version (set at build time in app/service).
var Version = service.Version

// Stdio are the streams the CLI talks to.
type Stdio struct {
	In       io.Reader
	Out, Err io.Writer
}

// exitError carries an exit code out of a command without printing more.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// Main runs the CLI with args and returns the process exit code.
func Main(args []string, stdio Stdio) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRoot(stdio)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	var ee exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.code
	default:
		fmt.Fprintf(stdio.Err, "airlock: %s\n", oneLine(err.Error()))
		return ExitAirlockError
	}
}

func newRoot(stdio Stdio) *cobra.Command {
	root := &cobra.Command{
		Use:           "airlock",
		Short:         "Run commands in a disposable Linux VM that sees only one folder",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       Version,
	}
	root.SetIn(stdio.In)
	root.SetOut(stdio.Out)
	root.SetErr(stdio.Err)
	g := &globals{}
	root.PersistentFlags().StringVar(&g.socket, "socket", "", "control socket of the service (default: the per-user socket)")
	root.PersistentFlags().BoolVar(&g.json, "json", false, "print listings as JSON")
	serve := newServeCmd(stdio, g)
	serve.Flags().StringVar(&g.imageDir, "image-dir", "", "folder of the guest image (default: found next to the program)")
	serve.Flags().BoolVarP(&g.verbose, "verbose", "v", false, "log what Airlock does to stderr")
	root.AddCommand(newRunCmd(stdio, g), serve, newStatusCmd(stdio, g),
		newVMCmd(stdio, g, "start", "Boot the service's VM"),
		newVMCmd(stdio, g, "stop", "Shut the service's VM down"),
		newVMCmd(stdio, g, "restart", "Replace the service's VM with a fresh one"),
		newTasksCmd(stdio, g), newLogsCmd(stdio, g), newCancelCmd(stdio, g),
		newEgressCmd(stdio, g), newWorkspaceCmd(stdio, g), newImageCmd(stdio, g), newMCPCmd(stdio, g),
		newSecretCmd(stdio, g))
	root.AddCommand(newChangesCmds(stdio, g)...)
	root.AddCommand(newConnectCmds(stdio, g)...)
	return root
}

// oneLine keeps an error to one line: the first line, with the rest's
// line breaks folded, so scripts can read it, and what else a terminal
// would act on escaped (an error may quote what the guest sent).
func oneLine(s string) string {
	return printable.String(strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ")), " "))
}
