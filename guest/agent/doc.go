// Package agent is the guest agent: a gRPC server (agent/v1) that runs
// tasks, reports the guest's state, sets its clock and asks init to power
// off.
//
// A task's lifetime is its process tree's. Every task runs in its own
// process group (or session, with a terminal) and its own cgroup v2, so
// everything it starts, even a process that setsid()s or daemonises, is in
// that cgroup. When the task's main process exits, the agent drains its
// output (at most a short grace), kills whatever the task left behind, and
// only then reports Exit: nothing a task started outlives it.
package agent
