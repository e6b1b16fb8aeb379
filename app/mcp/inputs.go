package mcp

import (
	"fmt"
	"maps"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/app/service"
	"github.com/airlock-sandbox/airlock/app/tasks"
	"github.com/airlock-sandbox/airlock/guest/api"
	"github.com/airlock-sandbox/airlock/internal/printable"
)

// Bounds on what an agent may send; each refusal says which one it hit.
const (
	maxArgs       = 4096
	maxArgvBytes  = 256 << 10
	maxShellBytes = 256 << 10
	maxEnv        = 256
	maxEnvBytes   = 256 << 10
	maxCwdBytes   = 4096
	maxIDBytes    = 64
)

// CommandInput is what run_command and start_task take.
type CommandInput struct {
	Argv           []string          `json:"argv,omitempty" jsonschema:"the program and its arguments, run directly without a shell, e.g. [\"ls\", \"-la\"]; give argv or command, not both"`
	Command        string            `json:"command,omitempty" jsonschema:"a shell command line run with /bin/sh -c, e.g. \"make test 2>&1\"; give argv or command, not both"`
	Env            map[string]string `json:"env,omitempty" jsonschema:"extra environment variables, name to value"`
	Cwd            string            `json:"cwd,omitempty" jsonschema:"working directory in the sandbox: absolute, or relative to /workspace (the default)"`
	TimeoutSeconds int               `json:"timeout_seconds,omitempty" jsonschema:"kill the task after this many seconds of running (0 or absent: the default)"`
	Stdin          string            `json:"stdin,omitempty" jsonschema:"text given to the task on standard input (absent: no input)"`
	Root           bool              `json:"root,omitempty" jsonschema:"run as root instead of the unprivileged user agent"`
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// request checks in against the bounds and builds the core's request.
// defTimeout applies when no timeout is given; maxTimeout is the ceiling.
func (in CommandInput) request(defTimeout, maxTimeout time.Duration, maxStdin int) (service.RunRequest, error) {
	var req service.RunRequest
	switch {
	case len(in.Argv) > 0 && in.Command != "":
		return req, fmt.Errorf("give either argv or command, not both")
	case len(in.Argv) == 0 && in.Command == "":
		return req, fmt.Errorf("nothing to run: give argv (e.g. [\"ls\", \"-la\"]) or command (e.g. \"ls -la | head\")")
	case len(in.Argv) > maxArgs:
		return req, fmt.Errorf("argv has %d entries; at most %d are accepted", len(in.Argv), maxArgs)
	case len(in.Argv) > 0 && in.Argv[0] == "":
		return req, fmt.Errorf("argv[0] is empty: it must name the program")
	case len(in.Command) > maxShellBytes:
		return req, fmt.Errorf("command is %d bytes; at most %d are accepted: put a long script in a file under /workspace and run that", len(in.Command), maxShellBytes)
	case strings.ContainsRune(in.Command, 0):
		return req, fmt.Errorf("command contains a NUL byte")
	}
	size := 0
	for i, a := range in.Argv {
		size += len(a)
		if strings.ContainsRune(a, 0) {
			return req, fmt.Errorf("argv[%d] contains a NUL byte", i)
		}
	}
	if size > maxArgvBytes {
		return req, fmt.Errorf("argv is %d bytes in all; at most %d are accepted: put long data in a file under /workspace or pass it as stdin", size, maxArgvBytes)
	}
	if len(in.Env) > maxEnv {
		return req, fmt.Errorf("env has %d variables; at most %d are accepted", len(in.Env), maxEnv)
	}
	size = 0
	for _, k := range slices.Sorted(maps.Keys(in.Env)) {
		v := in.Env[k]
		if !envName.MatchString(k) {
			return req, fmt.Errorf("env name %q is not a valid variable name (letters, digits and _, not starting with a digit)", k)
		}
		if strings.ContainsRune(v, 0) {
			return req, fmt.Errorf("env %s contains a NUL byte", k)
		}
		size += len(k) + len(v) + 1
		req.Env = append(req.Env, k+"="+v)
	}
	if size > maxEnvBytes {
		return req, fmt.Errorf("env is %d bytes in all; at most %d are accepted", size, maxEnvBytes)
	}
	if len(in.Cwd) > maxCwdBytes || strings.ContainsRune(in.Cwd, 0) {
		return req, fmt.Errorf("cwd must be a path of at most %d bytes without NUL", maxCwdBytes)
	}
	if in.Cwd != "" {
		req.Cwd = in.Cwd
		if !path.IsAbs(in.Cwd) {
			req.Cwd = path.Join(api.WorkspaceDir, in.Cwd)
		}
	}
	switch {
	case in.TimeoutSeconds < 0:
		return req, fmt.Errorf("timeout_seconds is negative; give 1 to %d, or leave it out for %d", int64(maxTimeout/time.Second), int64(defTimeout/time.Second))
	case in.TimeoutSeconds == 0:
		req.Timeout = defTimeout
	case time.Duration(in.TimeoutSeconds) > maxTimeout/time.Second:
		return req, fmt.Errorf("timeout_seconds %d is over the limit of %d; for longer jobs use start_task", in.TimeoutSeconds, int64(maxTimeout/time.Second))
	default:
		req.Timeout = time.Duration(in.TimeoutSeconds) * time.Second
	}
	if len(in.Stdin) > maxStdin {
		return req, fmt.Errorf("stdin is %d bytes; at most %d are accepted: write large input to a file under /workspace instead", len(in.Stdin), maxStdin)
	}
	if in.Stdin != "" {
		req.Stdin = []byte(in.Stdin)
	}
	req.Argv = in.Argv
	req.Shell = in.Command
	req.Root = in.Root
	return req, nil
}

// checkID refuses ids no task can have before they reach the core.
func checkID(id string) error {
	if id == "" {
		return fmt.Errorf("task_id is empty: use the id run_command, start_task or list_tasks returned")
	}
	if len(id) > maxIDBytes {
		return fmt.Errorf("task_id is %d bytes; task ids are 8 characters", len(id))
	}
	return nil
}

// TaskInfo describes a task for an agent.
type TaskInfo struct {
	TaskID string `json:"task_id"`
	// Command is argv (quoted where needed) or the shell line, cut at 300 bytes.
	Command string `json:"command"`
	State   string `json:"state" jsonschema:"queued, running, exited, killed, timed-out or lost"`
	// Finished is true once the state is final: nothing more will change.
	Finished bool `json:"finished"`
	// ExitCode is set when the process ended by itself with a status.
	ExitCode *int   `json:"exit_code,omitempty"`
	Signal   string `json:"signal,omitempty" jsonschema:"the signal that ended the process, e.g. SIGKILL"`
	Reason   string `json:"reason,omitempty" jsonschema:"why the task was killed, timed out or lost"`
	Cwd      string `json:"cwd,omitempty"`
	Root     bool   `json:"root,omitempty"`
	// EnvNames lists the variables given (their values are never stored).
	EnvNames        []string  `json:"env_names,omitempty"`
	TimeoutSeconds  float64   `json:"timeout_seconds,omitempty"`
	Created         time.Time `json:"created"`
	Started         time.Time `json:"started,omitzero"`
	Ended           time.Time `json:"ended,omitzero"`
	DurationSeconds float64   `json:"duration_seconds,omitempty" jsonschema:"run time so far, or until the end"`
	StdoutBytes     int64     `json:"stdout_bytes"`
	StderrBytes     int64     `json:"stderr_bytes"`
	// LogBytes is the log offset at the end of the output written so far.
	LogBytes int64 `json:"log_bytes" jsonschema:"the read_task_output offset at the end of the output so far"`
	// OutputTruncated: the log reached its bound; later output was discarded.
	OutputTruncated bool `json:"output_truncated,omitempty" jsonschema:"the output passed the per-task log limit: the rest was discarded (the task ran on)"`
}

const maxCommandText = 300

func printableAll(l []string) []string {
	if l == nil {
		return nil
	}
	out := make([]string, len(l))
	for i, s := range l {
		out[i] = printable.String(s)
	}
	return out
}

// info shapes a task; now is the time used for the duration of a live task.
func info(t tasks.Task, now time.Time) TaskInfo {
	// The command, its folder and variables may hold anything the agent or
	// the user typed, and a reason may quote the guest: all come out
	// escaped for a terminal, as the output does.
	ti := TaskInfo{
		TaskID: printable.String(t.ID), Command: printable.String(commandText(t.Command)), State: string(t.State), Finished: t.State.Final(),
		Reason: printable.String(t.Reason), Cwd: printable.String(t.Command.Cwd), Root: t.Command.Root, EnvNames: printableAll(t.Command.Env),
		TimeoutSeconds: t.Command.Timeout.Seconds(),
		Created:        t.Created, Started: t.Started, Ended: t.Ended,
		StdoutBytes: t.Output.Stdout, StderrBytes: t.Output.Stderr, LogBytes: t.Output.LogBytes,
		OutputTruncated: t.Output.Truncated,
	}
	if t.Exit.Signal != 0 {
		ti.Signal = signalName(t.Exit.Signal)
	} else if t.State == tasks.Exited {
		ti.ExitCode = ptr(t.Exit.Code)
	}
	if !t.Started.IsZero() {
		end := t.Ended
		if end.IsZero() {
			end = now
		}
		ti.DurationSeconds = end.Sub(t.Started).Round(time.Millisecond).Seconds()
	}
	return ti
}

// commandText renders a command for people, cut to maxCommandText bytes.
func commandText(c tasks.Command) string {
	s := c.Shell
	if len(c.Argv) > 0 {
		q := make([]string, len(c.Argv))
		for i, a := range c.Argv {
			q[i] = shellQuote(a)
		}
		s = strings.Join(q, " ")
	}
	if len(s) > maxCommandText {
		s = strings.ToValidUTF8(s[:maxCommandText], "") + "…"
	}
	return s
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

var signalNames = map[int]string{
	1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE",
	9: "SIGKILL", 11: "SIGSEGV", 13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM", 24: "SIGXCPU", 25: "SIGXFSZ",
}

func signalName(n int) string {
	if s, ok := signalNames[n]; ok {
		return s
	}
	return fmt.Sprintf("signal %d", n)
}
