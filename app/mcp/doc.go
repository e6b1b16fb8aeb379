// Package mcp is Airlock's Model Context Protocol server: it exposes the
// sandbox to an agent (run a command, start a long task and read its output
// later, cancel it, list tasks, the sandbox's status and the egress log) as
// MCP tools, over any transport of github.com/modelcontextprotocol/go-sdk.
// `airlock mcp` serves it on stdio with Serve.
//
// It is an adapter: every tool is one or two calls to service.Core, whose
// results are shaped for an agent (bounded, with the next step spelled out).
// It works the same over *service.Service in process and over app/api's
// Client on the control socket.
//
// # What an agent cannot do
//
// No tool changes the egress allow or deny lists, the mapped hosts, the
// workspace folder, its read-only mode or the VM's size, and none starts,
// stops or restarts the VM. An agent that read a prompt injection could
// otherwise widen its own sandbox: only the user widens it, in the app or
// with `airlock egress allow` and `airlock workspace set`. The egress_log
// tool exists so the agent can tell its user which host to allow and why.
// Likewise list_changes shows the changes that wait for the user's review,
// and no tool applies, discards or undoes them: an agent cannot approve its
// own changes.
//
// # Output of run_command
//
// run_command waits for the task and returns each stream whole when it is
// at most Options.OutputLimit bytes. A longer stream is cut to its first
// quarter and its last three quarters of that budget (head and tail: the
// first error and the final summary are what an agent usually needs; the cuts move to a
// line end when one is near), with an inline marker saying how many bytes were left out and a note giving
// the task id and the log offset from which read_task_output returns them.
// The full output always stays in the task's log on the host.
//
// Output is returned escaped for a terminal, since clients print tool
// results on one: control characters but newline and tab, C1 controls,
// bidi overrides and bytes that are not UTF-8 come back as escapes such as
// \x1b and \xff (read_task_output does the same). A task its VM lost
// before it ended makes run_command fail (isError), with what it printed.
//
// # Progress and cancellation
//
// A run_command request that carries a progress token gets
// notifications/progress while it waits: each time the task's state or
// output size changes, and every ten seconds when nothing does, so a
// client that restarts its timeout on progress waits for a long command.
// A request the client cancels (notifications/cancelled) cancels its task
// and, over Serve, gets no response, as the protocol asks.
//
// # Offsets
//
// read_task_output offsets are positions in the task's log on the host, which
// interleaves stdout and stderr records: 0 is the start, and next_offset of
// a reply is where the next call continues. Any other value is refused.
package mcp
