package cli

import (
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/airlock-sandbox/airlock/app/agents"
	"github.com/airlock-sandbox/airlock/app/api"
	"github.com/spf13/cobra"
)

// mcpEntry is the MCP server this airlock program adds to an agent: itself,
// by its full path, serving `airlock mcp`.
func mcpEntry() (agents.Entry, error) {
	exe, err := os.Executable()
	if err != nil {
		return agents.Entry{}, fmt.Errorf("the path of this airlock program is unknown: %w", err)
	}
	return agents.MCPEntry(exe), nil
}

// agentsAPI lets the control API connect the agents on this machine to
// this airlock program (the desktop app's Settings → Agents).
func agentsAPI() api.Option {
	var a api.Agents
	a.Entry, a.Unavailable = mcpEntry()
	if a.Unavailable == nil {
		a.Host, a.Unavailable = agents.Local()
	}
	return api.WithAgents(a)
}

func newConnectCmds(stdio Stdio, g *globals) []*cobra.Command {
	names := strings.Join(agents.Names(), "|")
	var print bool
	connect := &cobra.Command{
		Use:   "connect [" + names + "]...",
		Short: "Add Airlock's MCP server to an agent's configuration, or list the agents",
		Long: `Adds Airlock's MCP server (this airlock program, running "airlock mcp") to the
agent's own configuration file, where the agent looks for MCP servers on this
OS. Everything else in the file stays as it was; the first change keeps a copy
of the file beside it (<file>` + agents.BackupSuffix + `); a file that does not
parse is left alone. Restart the agent afterwards.

Without a name, lists the agents, whether each is on this machine, and whether
it is connected. --print shows the entry for an agent instead of writing it.`,
		ValidArgs: agents.Names(),
		RunE: func(cmd *cobra.Command, args []string) error {
			entry, err := mcpEntry()
			if err != nil {
				return err
			}
			host, err := agents.Local()
			if err != nil {
				return err
			}
			if len(args) == 0 {
				if print {
					return fmt.Errorf("--print needs an agent: one of %s", strings.Join(agents.Names(), ", "))
				}
				return listAgents(stdio, g, host, entry)
			}
			as, err := lookupAgents(args)
			if err != nil {
				return err
			}
			for _, a := range as {
				if print {
					fmt.Fprintf(stdio.Err, "%s reads its MCP servers from %s:\n", a.Title, host.Path(a))
					stdio.Out.Write(agents.Print(a, entry))
					continue
				}
				res, err := host.Connect(a, entry)
				if err != nil {
					return fmt.Errorf("connect %s: %w", a.Name, err)
				}
				reportChange(stdio, a, res, "connected", "was already connected")
			}
			return nil
		},
	}
	connect.Flags().BoolVar(&print, "print", false, "show the entry and where it goes instead of writing it")

	disconnect := &cobra.Command{
		Use:   "disconnect " + names + "...",
		Short: "Remove Airlock's MCP server from an agent's configuration",
		Long: `Removes the MCP server named "airlock" from the agent's configuration file,
keeping everything else in it as it was. Restart the agent afterwards.`,
		Args:      cobra.MinimumNArgs(1),
		ValidArgs: agents.Names(),
		RunE: func(cmd *cobra.Command, args []string) error {
			host, err := agents.Local()
			if err != nil {
				return err
			}
			as, err := lookupAgents(args)
			if err != nil {
				return err
			}
			for _, a := range as {
				res, err := host.Disconnect(a)
				if err != nil {
					return fmt.Errorf("disconnect %s: %w", a.Name, err)
				}
				reportChange(stdio, a, res, "disconnected", "was not connected")
			}
			return nil
		},
	}
	return []*cobra.Command{connect, disconnect}
}

func lookupAgents(names []string) ([]agents.Agent, error) {
	out := make([]agents.Agent, 0, len(names))
	for _, n := range names {
		a, err := agents.Lookup(n)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

func reportChange(stdio Stdio, a agents.Agent, res agents.Result, done, same string) {
	if !res.Changed {
		fmt.Fprintf(stdio.Out, "%s %s: %s\n", a.Title, same, res.Path)
		return
	}
	fmt.Fprintf(stdio.Out, "%s %s: %s\n", a.Title, done, res.Path)
	if res.Backup != "" {
		fmt.Fprintf(stdio.Out, "  the file as it was is kept in %s\n", res.Backup)
	}
	fmt.Fprintf(stdio.Out, "  restart %s to use it\n", a.Title)
}

func listAgents(stdio Stdio, g *globals, host agents.Host, entry agents.Entry) error {
	sts := host.Statuses(entry)
	if g.json {
		return printJSON(stdio.Out, sts)
	}
	tw := tabwriter.NewWriter(stdio.Out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AGENT\tFOUND\tCONNECTED\tCONFIG")
	for _, st := range sts {
		conn := yesNo(st.Connected)
		switch {
		case st.Error != "":
			conn = "unreadable"
		case st.Other:
			conn = "other airlock"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", st.Name, yesNo(st.Found), conn, st.Path)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, st := range sts {
		if st.Error != "" {
			fmt.Fprintf(stdio.Err, "%s: %s\n", st.Name, oneLine(st.Error))
		}
	}
	return nil
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
