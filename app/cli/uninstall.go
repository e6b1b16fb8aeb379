package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/app/api"
	"github.com/airlock-sandbox/airlock/app/secrets"
	"github.com/airlock-sandbox/airlock/app/service"
	"github.com/airlock-sandbox/airlock/app/settings"
	"github.com/spf13/cobra"
)

// dataPlace is one folder Airlock keeps data in.
type dataPlace struct {
	What string `json:"what"`
	Path string `json:"path"`
}

// dataPlaces lists the folders Airlock keeps data in for this user, and
// the settings file's path (read before the folders go, for the keychain
// items its secrets name).
func dataPlaces(g *globals) (places []dataPlace, settingsPath string, err error) {
	add := func(what, path string) {
		if path == "" {
			return
		}
		for _, p := range places {
			if p.Path == path {
				return
			}
		}
		places = append(places, dataPlace{what, path})
	}
	if settingsPath, err = settings.DefaultPath(); err != nil {
		return nil, "", err
	}
	add("settings", filepath.Dir(settingsPath))
	state, err := stateDir()
	if err != nil {
		return nil, "", err
	}
	add("state: task history, egress log, CA, persistent disks, held changes", state)
	add("cache: templates, console log, image checksums", service.CacheDir())
	if runtime.GOOS != "windows" {
		sock, err := g.socketPath()
		if err == nil && filepath.Base(filepath.Dir(sock)) == "airlock" {
			add("control socket", filepath.Dir(sock))
		}
	}
	return places, settingsPath, nil
}

func newUninstallCmd(stdio Stdio, g *globals) *cobra.Command {
	var purge, yes bool
	cmd := &cobra.Command{
		Use:   "uninstall --purge [--yes]",
		Short: "Remove every file and keychain item Airlock keeps for you (not the program, not your folders)",
		Long: `Lists, and with --purge removes, what Airlock keeps for this user: the settings,
the state folder (task history, egress log, the CA, persistent disks, held
changes not yet applied), the cache (templates, console log), the control
socket's folder, and the keychain items of the secrets in the settings. The
running service is stopped first; while tasks run nothing is removed. Your
workspaces are never touched. The program itself stays: remove it with
'make uninstall' (same PREFIX) or as you installed it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			places, settingsPath, err := dataPlaces(g)
			if err != nil {
				return err
			}
			st, err := settings.Load(settingsPath, settings.Validators{})
			if err != nil {
				st = settings.Settings{}
			}
			var items []string
			for _, s := range st.Secrets {
				if s.Source == secrets.SourceKeychain {
					items = append(items, s.Name)
				}
			}
			if err := workspacesOutside(st, places); err != nil {
				return err
			}
			if !purge {
				if g.json {
					return printJSON(stdio.Out, nonNil(places))
				}
				writePlaces(stdio, places, items)
				fmt.Fprintln(stdio.Out, "nothing removed: run airlock uninstall --purge to remove them")
				return nil
			}
			if !yes {
				writePlaces(stdio, places, items)
				fmt.Fprint(stdio.Err, "Remove all of these? [y/N] ")
				line, _ := bufio.NewReader(stdio.In).ReadString('\n')
				if a := strings.ToLower(strings.TrimSpace(line)); a != "y" && a != "yes" {
					return errors.New("not confirmed: nothing removed (--yes skips the question)")
				}
			}
			if err := stopService(cmd.Context(), stdio, g); err != nil {
				return err
			}
			var errs []error
			for _, name := range items {
				if err := (secrets.OSKeychain{}).Delete(name); err != nil {
					errs = append(errs, fmt.Errorf("keychain item %s/%s: %w", secrets.KeychainService, name, err))
				}
			}
			var removed []string
			for _, p := range places {
				if err := os.RemoveAll(p.Path); err != nil {
					errs = append(errs, err)
					continue
				}
				removed = append(removed, p.Path)
			}
			if g.json {
				if err := printJSON(stdio.Out, map[string][]string{"removed": nonNil(removed), "keychain_items": nonNil(items)}); err != nil {
					return err
				}
			} else {
				for _, p := range removed {
					fmt.Fprintf(stdio.Out, "removed %s\n", p)
				}
				for _, n := range items {
					fmt.Fprintf(stdio.Out, "removed keychain item %s/%s\n", secrets.KeychainService, n)
				}
			}
			return errors.Join(errs...)
		},
	}
	cmd.Flags().BoolVar(&purge, "purge", false, "remove them (without it, only list them)")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	return cmd
}

// writePlaces prints what uninstall would remove.
func writePlaces(stdio Stdio, places []dataPlace, items []string) {
	for _, p := range places {
		fmt.Fprintf(stdio.Out, "%s\t(%s)\n", p.Path, p.What)
	}
	for _, n := range items {
		fmt.Fprintf(stdio.Out, "keychain item %s/%s\n", secrets.KeychainService, n)
	}
}

// workspacesOutside refuses a purge that would remove a folder the user
// shared: a workspace inside one of Airlock's folders is the user's.
func workspacesOutside(st settings.Settings, places []dataPlace) error {
	ws := []string{st.Workspace}
	for w := range st.Changes {
		ws = append(ws, w)
	}
	for _, w := range ws {
		if w == "" {
			continue
		}
		for _, p := range places {
			if rel, err := filepath.Rel(p.Path, w); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
				return fmt.Errorf("workspace %s is inside %s: move it elsewhere first; nothing removed", w, p.Path)
			}
		}
	}
	return nil
}

// stopService stops the running service, if any, before its files go:
// refused while it runs tasks.
func stopService(ctx context.Context, stdio Stdio, g *globals) error {
	c, err := g.client(ctx)
	if errors.Is(err, api.ErrNotRunning) {
		return nil
	}
	if err != nil {
		return err
	}
	st, err := c.Status(ctx)
	if err != nil {
		return err
	}
	if st.RunningTasks > 0 {
		return fmt.Errorf("%d task(s) are running (see airlock tasks): cancel them or let them end, then run this again; nothing removed", st.RunningTasks)
	}
	sock, err := g.socketPath()
	if err != nil {
		return err
	}
	if err := signalService(sock); err != nil {
		return fmt.Errorf("the Airlock service is running and could not be stopped (%v): quit the desktop app or stop airlock serve, then run this again; nothing removed", err)
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := c.Ping(pctx)
		cancel()
		if err != nil {
			fmt.Fprintln(stdio.Err, "airlock: stopped the Airlock service")
			return nil
		}
	}
	return errors.New("the Airlock service did not stop within 30 s: quit the desktop app or stop airlock serve, then run this again; nothing removed")
}
