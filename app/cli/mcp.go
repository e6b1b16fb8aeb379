package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/airlock-sandbox/airlock/app/api"
	appmcp "github.com/airlock-sandbox/airlock/app/mcp"
	"github.com/airlock-sandbox/airlock/app/service"
	"github.com/spf13/cobra"
)

func newMCPCmd(stdio Stdio, g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve the sandbox to an agent as an MCP server on stdin/stdout",
		Long: `Speaks the Model Context Protocol on stdin/stdout so an agent can run commands
in the sandbox, follow long tasks and read the egress log. It uses the running
Airlock service when there is one; otherwise it runs the service in this
process for as long as the agent is connected. Agents cannot change the
workspace or the network rules: only you can.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			level := slog.LevelWarn
			if g.verbose {
				level = slog.LevelDebug
			}
			log := slog.New(slog.NewTextHandler(stdio.Err, &slog.HandlerOptions{Level: level}))
			var core service.Core
			opts := appmcp.Options{Version: Version, Logger: log}
			c, err := g.client(ctx)
			switch {
			case err == nil:
				core = c
				// The service may stop while the agent stays connected.
				opts.Unavailable = api.ErrNotRunning
			case errors.Is(err, api.ErrNotRunning):
				svc, err := g.openService(stdio)
				if err != nil {
					return err
				}
				defer func() {
					cctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					defer cancel()
					svc.Close(cctx)
				}()
				core = svc
			default:
				return err
			}
			if err := appmcp.Serve(ctx, core, stdio.In, stdio.Out, opts); err != nil && ctx.Err() == nil {
				return fmt.Errorf("mcp: %w", err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&g.imageDir, "image-dir", "", "folder of the guest image (default: found next to the program)")
	return cmd
}
