package cli

import (
	"fmt"
	"os"
	"runtime"

	"github.com/airlock-sandbox/airlock/app/sandbox"
	"github.com/airlock-sandbox/airlock/app/service"
	"github.com/airlock-sandbox/airlock/app/workspace"
	"github.com/spf13/cobra"
)

// newResetDiskCmd is "airlock workspace reset-disk".
func newResetDiskCmd(stdio Stdio, g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "reset-disk [DIR]",
		Short: "Wipe the persistent disk of workspace DIR (default: the service's workspace); the next boot starts clean",
		Long: `The standard image keeps changes outside /workspace (packages installed with pip
or apt, files in the home folder) on a persistent disk per workspace when asked
to (airlock run --keep-disk, or the keep_disk setting). reset-disk deletes that
disk; the next boot starts from the image alone. Without DIR the service stops
its VM, deletes the disk and boots again. With DIR, a disk a running VM uses is
refused (each VM holds a lock on its disk): stop that VM first.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var ws string
			if len(args) == 1 {
				host, err := workspace.Local(runtime.GOOS)
				if err != nil {
					return err
				}
				if ws, err = host.Validate(absPath(args[0])); err != nil {
					return err
				}
			} else {
				// The service stops its VM, deletes the disk, boots again.
				c, err := g.client(cmd.Context())
				if err != nil {
					return fmt.Errorf("%w (or name the workspace: airlock workspace reset-disk DIR)", err)
				}
				if err := c.ResetDisk(cmd.Context()); err != nil {
					return err
				}
				st, err := c.Status(cmd.Context())
				if err != nil {
					return err
				}
				if g.json {
					return printJSON(stdio.Out, st)
				}
				fmt.Fprintf(stdio.Out, "persistent disk of %s reset (vm %s)\n", displayWorkspace(st.Session.Workspace), st.Session.State)
				return nil
			}
			path, err := dataDiskPath(ws)
			if err != nil {
				return err
			}
			if err := sandbox.ResetDataDisk(path); err != nil {
				return err
			}
			if g.json {
				return printJSON(stdio.Out, map[string]string{"workspace": ws, "disk": path})
			}
			fmt.Fprintf(stdio.Out, "persistent disk of %s reset (%s)\n", displayWorkspace(ws), path)
			return nil
		},
	}
}

// displayWorkspace names a workspace for output ("" is none).
func displayWorkspace(ws string) string {
	if ws == "" {
		return "the sandbox without a workspace"
	}
	return ws
}

// stateDir is the user's state folder, where persistent disks live.
func stateDir() (string, error) {
	home, _ := os.UserHomeDir()
	state, err := service.StateDir(runtime.GOOS, home, os.Getenv)
	if err != nil {
		return "", fmt.Errorf("state folder: %w", err)
	}
	return state, nil
}

// dataDiskPath is the persistent disk of workspace ws in the user's state
// folder.
func dataDiskPath(ws string) (string, error) {
	state, err := stateDir()
	if err != nil {
		return "", err
	}
	return sandbox.DataDiskPath(state, ws), nil
}

// newImageCmd is "airlock image".
func newImageCmd(stdio Stdio, g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "image", Short: "Choose the guest image the service boots"}
	var keepDisk bool
	set := &cobra.Command{
		Use:   "set minimal|standard",
		Short: "Boot NAME from now on (the VM restarts on it)",
		Long: `minimal is a busybox guest (fast, small); standard is Debian with python3, pip,
git, curl, jq, sqlite3 and the libraries common data packages need, on a
read-only root disk. Changes outside /workspace start clean every boot unless
--keep-disk keeps them on the workspace's persistent disk.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := sandbox.CheckImageName(args[0]); err != nil {
				return err
			}
			c, err := g.client(cmd.Context())
			if err != nil {
				return err
			}
			if err := c.SetImage(cmd.Context(), args[0], keepDisk); err != nil {
				return err
			}
			st, err := c.Status(cmd.Context())
			if err != nil {
				return err
			}
			if g.json {
				return printJSON(stdio.Out, st)
			}
			fmt.Fprintf(stdio.Out, "image: %s, keep disk: %t (vm %s)\n", st.Session.Image, st.Session.KeepDisk, st.Session.State)
			return nil
		},
	}
	set.Flags().BoolVar(&keepDisk, "keep-disk", false, "keep changes outside /workspace on the workspace's persistent disk (standard only)")
	cmd.AddCommand(set)
	return cmd
}
