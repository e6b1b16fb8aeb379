package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"runtime"
	"time"

	"github.com/airlock-sandbox/airlock/app/api"
	"github.com/airlock-sandbox/airlock/app/service"
	"github.com/airlock-sandbox/airlock/frontend"
	"github.com/spf13/cobra"
)

// globals are the flags every service command shares.
type globals struct {
	socket   string
	json     bool
	imageDir string
	verbose  bool
}

func (g *globals) socketPath() (string, error) {
	if g.socket != "" {
		return g.socket, nil
	}
	return api.DefaultSocket()
}

// openService opens the in-process host core with the user's settings,
// state folder and guest image.
func (g *globals) openService(stdio Stdio) (*service.Service, error) {
	var dirs []string
	if g.imageDir != "" {
		dirs = []string{g.imageDir, g.imageDir + "/" + runtime.GOARCH}
	}
	log := slog.New(slog.DiscardHandler)
	if g.verbose {
		log = slog.New(slog.NewTextHandler(stdio.Err, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return service.OpenUser(dirs, log)
}

// client returns a client of the running service, or ErrNotRunning.
func (g *globals) client(ctx context.Context) (*api.Client, error) {
	sock, err := g.socketPath()
	if err != nil {
		return nil, err
	}
	c := api.NewClient(sock)
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := c.Ping(pctx); err != nil {
		if errors.Is(err, api.ErrNotRunning) {
			return nil, fmt.Errorf("%w: start it with `airlock serve` (or the desktop app)", api.ErrNotRunning)
		}
		return nil, err
	}
	return c, nil
}

func newServeCmd(stdio Stdio, g *globals) *cobra.Command {
	var httpAddr string
	var noBoot bool
	var parentPID int
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the Airlock service headless: a warm VM, the control API, task history",
		Long: `Runs the host core in the foreground: keeps one VM warm for the workspace in the
settings, serves the control API on a private unix socket (what the other
commands and 'airlock mcp' use), and with --http also on a loopback port for the
browser UI, guarded by a random token. Ctrl-C stops it and the VM, and so
does the end of the process named by --parent-pid (the desktop app passes its
own, so that an app that crashed leaves no helper running).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if cmd.Flags().Changed("parent-pid") {
				pctx, stop, err := watchParent(ctx, parentPID, parentPoll)
				if err != nil {
					return err
				}
				defer stop()
				ctx = pctx
			}
			sock, err := g.socketPath()
			if err != nil {
				return err
			}
			l, err := api.Listen(sock)
			if err != nil {
				return err
			}
			svc, err := g.openService(stdio)
			if err != nil {
				l.Close()
				return err
			}
			defer func() {
				cctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				if err := svc.Close(cctx); err != nil {
					fmt.Fprintf(stdio.Err, "airlock: %s\n", oneLine(err.Error()))
				}
			}()
			h := api.Handler(svc, nil, agentsAPI())
			errc := make(chan error, 2)
			go func() { errc <- api.Serve(ctx, l, h, nil) }()
			fmt.Fprintf(stdio.Err, "airlock: serving on %s\n", sock)
			if httpAddr != "" {
				hl, err := api.ListenLoopback(httpAddr)
				if err != nil {
					return fmt.Errorf("--http %w", err)
				}
				token := api.NewToken()
				// The browser UI and the API share the origin and the token:
				// /v1/ is the API, everything else the embedded web UI.
				web := http.NewServeMux()
				web.Handle("/v1/", h)
				web.Handle("/", frontend.Handler())
				go func() { errc <- api.Serve(ctx, hl, api.RequireToken(hl.Addr().String(), token, web), nil) }()
				fmt.Fprintf(stdio.Err, "airlock: browser UI and API at http://%s/?token=%s\n", hl.Addr(), token)
			}
			if !noBoot {
				go func() {
					if err := svc.StartVM(ctx); err != nil && ctx.Err() == nil {
						fmt.Fprintf(stdio.Err, "airlock: the VM did not start: %s\n", oneLine(err.Error()))
					}
				}()
			}
			select {
			case <-ctx.Done():
				if cause := context.Cause(ctx); cause != ctx.Err() {
					fmt.Fprintf(stdio.Err, "airlock: %s; stopping\n", cause)
				}
				return nil
			case err := <-errc:
				return err
			}
		},
	}
	cmd.Flags().StringVar(&httpAddr, "http", "", "also serve the API and browser UI on this loopback address (127.0.0.1:PORT)")
	cmd.Flags().BoolVar(&noBoot, "no-boot", false, "do not boot the VM until the first task or `airlock start`")
	cmd.Flags().IntVar(&parentPID, "parent-pid", 0, "stop, and stop the VM, when the process with this id ends")
	return cmd
}

// absPath makes a folder argument absolute before it travels to the
// service, which runs in another working folder.
func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}
