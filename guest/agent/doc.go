// Package agent is the guest agent: it runs tasks, one stream each on
// api.PortExec in guest/api/execwire's frames (output leaves as raw bytes
// read straight into the frame, no protobuf or HTTP/2 around it), and
// answers the agent calls on api.PortAgent, one stream each in the same
// frames (agentv1.AgentRequest and AgentResponse), which report the
// guest's state, set its clock and ask init to power off. The guest links
// no gRPC: its HTTP/2 stack cost /init start-up time and memory for three
// small calls.
//
// A task's lifetime is its process tree's. Every task runs in its own
// process group (or session, with a terminal) and its own cgroup v2, so
// everything it starts, even a process that setsid()s or daemonises, is in
// that cgroup. When the task's main process exits, the agent drains its
// output (at most a short grace), kills whatever the task left behind, and
// only then reports Exit: nothing a task started outlives it. A cgroup left
// empty by a task that was not root and never needed killing is reused by a
// later task (creating and removing one costs about a millisecond under
// emulation); any other is removed.
//
// Tasks not run as root are kept apart from each other, though they share
// one uid: each runs under its own init (the guest binary again, see
// TaskInitArg) in PID and mount namespaces of its own, with a /proc that
// shows only its own processes, so no task reads another's environment
// (its proxy credential) or open files, or signals it. A spare init is
// started ahead, so a task does not wait for one to start. Root tasks see
// the whole guest.
//
// # The shared folder
//
// What a task leaves in the workspace reaches the user's disk, where the
// host's own programs open, run and follow it. So with a folder shared
// every task, root's too, is started from a thread with a seccomp filter
// and a Landlock domain (restrict.go): no setuid or setgid bit, FIFO,
// socket or device node lands in the folder, and its symlink calls, and
// chmods that set those bits, are handed to the agent, which checks and
// does them for the task (symlink.go). Before each task the agent makes
// what the user's tools run from the folder (.git/config and hooks,
// .envrc, .vscode, .idea) read-only to tasks, unless the user allowed it
// for the workspace (toolconfig.go).
//
// # Network
//
// The guest has no network card. The agent starts the egress forwarders
// (guest/egress): 127.0.0.1:3128 for the HTTP proxy and 127.0.0.1:1080 for
// SOCKS5, each connection carried to the host gate, read only for the
// task's credential, which gives each task its share of the connections
// (egress.Tasks). A task's
// default environment has no proxy variables: the host decides them, with
// the per-task credential the gate uses to tell tasks apart, and sends them
// in ExecStart.env (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY, NO_PROXY and their
// lower-case twins), which the agent passes on unchanged; a connection that
// carries no credential is the gate's to judge. There is no resolver (/etc/resolv.conf is
// absent, nsswitch says "hosts: files"), so name lookups fail at once and
// only the proxies reach anything.
package agent
