package tasks

import (
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// State is where a task is in its life.
type State string

// The states of a task. Exited, Killed, TimedOut and Lost are final.
const (
	// Queued: created, not yet handed to the guest.
	Queued State = "queued"
	// Running: the guest started it and output may arrive.
	Running State = "running"
	// Exited: the process ended by itself, with a code or a signal.
	Exited State = "exited"
	// Killed: ended on request (cancel) before it exited by itself.
	Killed State = "killed"
	// TimedOut: ended because its deadline passed.
	TimedOut State = "timed-out"
	// Lost: its VM or agent died (or the host restarted), so how it ended is unknown.
	Lost State = "lost"
)

// transitions lists the legal moves; anything absent is refused. A queued
// task can be killed (cancelled before it started) or lost (its VM died
// first) but cannot exit or time out, since it never ran.
var transitions = map[State][]State{
	Queued:  {Running, Killed, Lost},
	Running: {Exited, Killed, TimedOut, Lost},
}

// Final reports whether no transition leaves s.
func (s State) Final() bool {
	switch s {
	case Exited, Killed, TimedOut, Lost:
		return true
	}
	return false
}

// Valid reports whether s is one of the six states.
func (s State) Valid() bool { return s == Queued || s == Running || s.Final() }

// CanBecome reports whether a task in state s may move to state to.
func (s State) CanBecome(to State) bool {
	for _, t := range transitions[s] {
		if t == to {
			return true
		}
	}
	return false
}

// UnmarshalJSON refuses unknown states, so a damaged record is noticed on load.
func (s *State) UnmarshalJSON(b []byte) error {
	var v string
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	if !State(v).Valid() {
		return fmt.Errorf("unknown task state %q", v)
	}
	*s = State(v)
	return nil
}

// Command is what a task runs and how. It mirrors guest/client.Spec.
type Command struct {
	// Argv is the program and its arguments; exactly one of Argv and Shell is set.
	Argv []string `json:"argv,omitempty"`
	// Shell is a command line for /bin/sh -c.
	Shell string `json:"shell,omitempty"`
	// Env is NAME=VALUE entries when given to Create; the Task keeps the
	// names only, because values may be secrets and are never stored or logged.
	Env []string `json:"env,omitempty"`
	// Cwd is the working directory in the guest; empty means the workspace.
	Cwd string `json:"cwd,omitempty"`
	// Root runs the task as root instead of the unprivileged task user.
	Root bool `json:"root,omitempty"`
	// TTY gives the task a terminal.
	TTY bool `json:"tty,omitempty"`
	// Timeout bounds the run time; 0 means none. The deadline starts at Start.
	Timeout time.Duration `json:"timeout,omitempty"`
}

// validate checks the shape the guest client will also insist on, early.
func (c Command) validate() error {
	if (len(c.Argv) == 0) == (c.Shell == "") {
		return fmt.Errorf("exactly one of argv and shell is needed")
	}
	if len(c.Argv) > 0 && c.Argv[0] == "" {
		return fmt.Errorf("argv[0] is empty")
	}
	if c.Timeout < 0 {
		return fmt.Errorf("negative timeout %v", c.Timeout)
	}
	for i, e := range c.Env {
		if name := envName(e); name == "" || strings.ContainsAny(name, "\x00") {
			return fmt.Errorf("env[%d]: no variable name", i)
		}
	}
	return nil
}

// withoutValues returns c with Env reduced to names.
func (c Command) withoutValues() Command {
	c.Argv = append([]string(nil), c.Argv...)
	names := make([]string, len(c.Env))
	for i, e := range c.Env {
		names[i] = envName(e)
	}
	if len(names) == 0 {
		names = nil
	}
	c.Env = names
	return c
}

func envName(e string) string {
	name, _, _ := strings.Cut(e, "=")
	return name
}

// Exit is how a task that ran ended.
type Exit struct {
	// Code is the exit status (meaningful for Exited without Signal).
	Code int `json:"code"`
	// Signal ended the process, or 0.
	Signal int `json:"signal,omitempty"`
}

// Output describes what the log holds for a task.
type Output struct {
	// Stdout and Stderr count the payload bytes stored per stream.
	Stdout int64 `json:"stdout"`
	Stderr int64 `json:"stderr"`
	// LogBytes is the committed size of the log file: the offset a reader
	// reaches at the end.
	LogBytes int64 `json:"log_bytes"`
	// Dropped counts output bytes that could not be stored (see Error
	// and Truncated).
	Dropped int64 `json:"dropped,omitempty"`
	// Truncated is set once the log reached the store's per-task bound
	// (Options.MaxTaskBytes): a note ends the log and later output is
	// discarded, counted in Dropped, while the task runs on.
	Truncated bool `json:"truncated,omitempty"`
	// Error is the first log or metadata write error, when there was one.
	// The task's state is kept regardless.
	Error string `json:"error,omitempty"`
}

// Task is a snapshot of one task. Values are copies; change a task only
// through the Store.
type Task struct {
	// ID is 8 characters of lower-case base32, safe in URLs and file names.
	ID string `json:"id"`
	// Command is what runs, with Env reduced to names.
	Command Command `json:"command"`
	// State is where the task is in its life.
	State State `json:"state"`
	// Exit is the status a final task ended with (zero when unknown).
	Exit Exit `json:"exit"`
	// Reason says why a task was killed or lost, for people.
	Reason string `json:"reason,omitempty"`
	// Created, Started and Ended are when the task entered Queued, Running
	// and its final state; Deadline is Started plus the timeout, if any.
	Created  time.Time `json:"created"`
	Started  time.Time `json:"started,omitzero"`
	Ended    time.Time `json:"ended,omitzero"`
	Deadline time.Time `json:"deadline,omitzero"`
	// Output describes the task's log.
	Output Output `json:"output"`
}

// idLen is the length of a task id: 40 random bits in lower-case base32.
const idLen = 8

var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// newID returns a short random URL- and file-name-safe id.
func newID() string {
	var b [5]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return idEncoding.EncodeToString(b[:])
}

// validID guards every path built from an id a caller handed in.
func validID(id string) bool {
	if len(id) != idLen {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= '2' && c <= '7') {
			return false
		}
	}
	return true
}
