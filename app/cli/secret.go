package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/airlock-sandbox/airlock/app/api"
	"github.com/airlock-sandbox/airlock/app/egress"
	"github.com/airlock-sandbox/airlock/app/egress/intercept"
	"github.com/airlock-sandbox/airlock/app/secrets"
	"github.com/airlock-sandbox/airlock/app/service"
	"github.com/airlock-sandbox/airlock/app/settings"
	"github.com/spf13/cobra"
	"golang.org/x/term"
)

// secretCore returns the running service, or the service opened in this
// process (closed by the returned function) when none runs.
func secretCore(ctx context.Context, stdio Stdio, g *globals) (service.Core, func(), error) {
	c, err := g.client(ctx)
	if err == nil {
		return c, func() {}, nil
	}
	if !errors.Is(err, api.ErrNotRunning) {
		return nil, nil, err
	}
	svc, err := service.OpenUserSettings(nil)
	if err != nil {
		return nil, nil, err
	}
	return svc, func() {
		cctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		svc.Close(cctx)
	}, nil
}

func newSecretCmd(stdio Stdio, g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "secret",
		Short: "Credentials the gate adds on the way out; the sandbox only sees placeholders",
		Long: `A secret has a name, the hosts it may be sent to, and where its value is: the OS
keychain (the value is read from stdin), an environment variable or a file.
A task run with --secret NAME gets NAME=<placeholder>; the gate terminates TLS
for the secret's hosts and puts the value in place of the placeholder (or in
the --header template) only on requests to those hosts. A placeholder sent to
any other host is refused and logged. Values are never shown.`,
	}
	var hosts []string
	var header, fromEnv, fromFile string
	set := &cobra.Command{
		Use:   "set NAME --host HOST [--host HOST]... [--header 'Authorization: Bearer {}']",
		Short: "Add or replace a secret; the value is read from stdin unless --from-env or --from-file",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			// The arguments are checked before the value is asked for.
			if err := secrets.CheckSpec(args[0], hosts, header); err != nil {
				return err
			}
			req := service.SecretRequest{Name: args[0], Hosts: hosts, Header: header, FromEnv: fromEnv}
			if fromFile != "" {
				req.FromFile = absPath(fromFile)
			}
			if fromEnv == "" && fromFile == "" {
				v, err := readSecretValue(stdio, args[0])
				if err != nil {
					return err
				}
				req.Value = v
			}
			core, done, err := secretCore(cmd.Context(), stdio, g)
			if err != nil {
				return err
			}
			defer done()
			info, err := core.SetSecret(cmd.Context(), req)
			if err != nil {
				return err
			}
			if _, ok := core.(*service.Service); ok && info.Source == secrets.SourceSession {
				// In-process service: a value kept in memory dies with it.
				_ = core.RemoveSecret(cmd.Context(), info.Name)
				return fmt.Errorf("no OS keychain is available and no Airlock service is running to hold the value: start `airlock serve`, or use --from-env VAR or --from-file FILE")
			}
			if g.json {
				return printJSON(stdio.Out, info)
			}
			fmt.Fprintf(stdio.Out, "secret %s: hosts %s, value from %s\n", info.Name, strings.Join(info.Hosts, " "), info.Source)
			if info.Note != "" {
				fmt.Fprintf(stdio.Err, "airlock: note: %s\n", info.Note)
			}
			return nil
		},
	}
	set.Flags().StringArrayVar(&hosts, "host", nil, "a host the secret may be sent to: example.com or *.example.com, optionally :PORT (repeatable, at least one)")
	set.Flags().StringVar(&header, "header", "", "send the secret as this header on every request to its hosts, {} standing for the value")
	set.Flags().StringVar(&fromEnv, "from-env", "", "read the value from this environment variable of the Airlock process that uses it")
	set.Flags().StringVar(&fromFile, "from-file", "", "read the value from this file whenever it is needed")
	set.MarkFlagsMutuallyExclusive("from-env", "from-file")

	list := &cobra.Command{
		Use: "list", Short: "List secrets: names, hosts, how they are sent and where the value is (never the value)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			core, done, err := secretCore(cmd.Context(), stdio, g)
			if err != nil {
				return err
			}
			defer done()
			l, err := core.Secrets(cmd.Context())
			if err != nil {
				return err
			}
			if g.json {
				return printJSON(stdio.Out, nonNil(l))
			}
			tw := tabwriter.NewWriter(stdio.Out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tHOSTS\tSENT AS\tVALUE FROM\tSTATUS")
			for _, s := range l {
				how := "placeholder"
				if s.Header != "" {
					how = s.Header
				}
				state := "ok"
				if !s.Available {
					state = "unavailable: " + s.Problem
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.Name, strings.Join(s.Hosts, " "), how, s.Source, state)
			}
			return tw.Flush()
		},
	}
	rm := &cobra.Command{
		Use: "rm NAME", Aliases: []string{"remove"}, Short: "Remove a secret (and its keychain item)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			core, done, err := secretCore(cmd.Context(), stdio, g)
			if err != nil {
				return err
			}
			defer done()
			if err := core.RemoveSecret(cmd.Context(), args[0]); err != nil {
				return err
			}
			if g.json {
				return printJSON(stdio.Out, map[string]any{"name": args[0], "removed": true})
			}
			fmt.Fprintf(stdio.Out, "secret %s removed\n", args[0])
			return nil
		},
	}
	cmd.AddCommand(set, list, rm)
	return cmd
}

// readSecretValue reads the value from stdin: without echo from a
// terminal, or whole (bounded) from a pipe.
func readSecretValue(stdio Stdio, name string) (string, error) {
	if in, ok := stdio.In.(*os.File); ok && term.IsTerminal(int(in.Fd())) {
		fmt.Fprintf(stdio.Err, "Value of %s (not shown): ", name)
		b, err := term.ReadPassword(int(in.Fd()))
		fmt.Fprintln(stdio.Err)
		if err != nil {
			return "", fmt.Errorf("read the value: %w", err)
		}
		return string(b), nil
	}
	b, err := io.ReadAll(io.LimitReader(stdio.In, secrets.MaxValue+3))
	if err != nil {
		return "", fmt.Errorf("read the value from stdin: %w", err)
	}
	if len(b) == 0 {
		return "", errors.New("no value on stdin: pipe it in (e.g. `pass show x | airlock secret set NAME --host H`), or use --from-env VAR or --from-file FILE")
	}
	return string(b), nil
}

// ephemeralCredentials prepares what an ephemeral `run` needs for secrets:
// the installation CA, the values of the secrets in the settings, the
// upstream roots and proxy, and NAME=placeholder for the secrets asked for.
func (f runFlags) ephemeralCredentials() (egress.Config, []string, error) {
	var cfg egress.Config
	home, _ := os.UserHomeDir()
	state, err := service.StateDir(runtime.GOOS, home, os.Getenv)
	if err != nil {
		return cfg, nil, fmt.Errorf("state folder: %w", err)
	}
	if cfg.CA, err = intercept.LoadCA(filepath.Join(state, "ca")); err != nil {
		return cfg, nil, err
	}
	st := settings.Default()
	if p, err := settings.DefaultPath(); err == nil {
		if st, err = settings.Load(p, settings.Validators{Secret: secrets.Validate}); err != nil {
			return cfg, nil, err
		}
	}
	vault := secrets.NewStore(secrets.OSKeychain{}, nil)
	env, err := vault.Env(st.Secrets, f.secrets)
	if err != nil {
		return cfg, nil, err
	}
	// Secrets this run did not ask for, and cannot read, are left out:
	// their placeholders are in no task's environment.
	cfg.Secrets, _ = vault.ForGate(st.Secrets)
	cfg.UpstreamRoots, err = intercept.UpstreamRoots(append(st.UpstreamCAs, f.upstreamCAs...))
	if err != nil {
		return cfg, nil, err
	}
	cfg.UpstreamProxy = st.UpstreamProxy
	if f.upstreamProxy != "" {
		cfg.UpstreamProxy = f.upstreamProxy
	}
	cfg.Inspect = st.Inspect || f.inspect
	return cfg, env, nil
}
