package service

import (
	"context"
	"io"
	"time"

	"github.com/airlock-sandbox/airlock/app/changes"
	"github.com/airlock-sandbox/airlock/app/egress"
	"github.com/airlock-sandbox/airlock/app/session"
	"github.com/airlock-sandbox/airlock/app/settings"
	"github.com/airlock-sandbox/airlock/app/tasks"
)

// Core is everything a front door can ask of Airlock. *Service implements it
// in process; app/api's Client implements it over the control socket, so
// the CLI and the MCP server work the same against either.
type Core interface {
	Status(ctx context.Context) (Status, error)
	Settings(ctx context.Context) (settings.Settings, error)
	StartVM(ctx context.Context) error
	StopVM(ctx context.Context) error
	RestartVM(ctx context.Context) error
	// SetWorkspace shares dir from now on, read-only or not, taking the
	// guest's writes in mode ("" keeps the folder's mode; auto for a new
	// one).
	SetWorkspace(ctx context.Context, dir string, readOnly bool, mode changes.Mode) error
	SetImage(ctx context.Context, image string, keepDisk bool) error
	// SetMachine sets the VM's CPUs and memory (MiB), within Status's
	// Limits, from its next start.
	SetMachine(ctx context.Context, cpus, memoryMiB int) error
	ResetDisk(ctx context.Context) error

	Run(ctx context.Context, req RunRequest) (tasks.Task, error)
	Task(ctx context.Context, id string) (tasks.Task, error)
	Tasks(ctx context.Context) ([]tasks.Task, error)
	Wait(ctx context.Context, id string) (tasks.Task, error)
	Cancel(ctx context.Context, id string) error
	Logs(ctx context.Context, id string, offset int64) ([]tasks.Chunk, int64, error)
	FollowLogs(ctx context.Context, id string, offset int64) (<-chan tasks.Chunk, error)

	EgressLog(ctx context.Context) ([]egress.Decision, error)
	FollowEgress(ctx context.Context) (<-chan egress.Decision, error)
	EgressRule(ctx context.Context, action, pattern string) (settings.Settings, error)
	// Events streams session, task, egress and ask events (see Event).
	// With answer, the caller is a UI that answers asks (Answer) while the
	// stream lasts; without any such UI, unmatched connections are denied
	// at once.
	Events(ctx context.Context, answer bool) (<-chan Event, error)
	Asks(ctx context.Context) ([]Ask, error)
	Answer(ctx context.Context, id, verdict string) error

	// Secrets lists the credentials the gate adds (never their values).
	Secrets(ctx context.Context) ([]SecretInfo, error)
	// SetSecret adds or replaces a credential; the value travels once,
	// in the request, and is never returned.
	SetSecret(ctx context.Context, req SecretRequest) (SecretInfo, error)
	RemoveSecret(ctx context.Context, name string) error

	// Changes lists the workspace's pending changes (review and auto
	// modes hold the guest's writes until they are applied).
	Changes(ctx context.Context) (ChangesList, error)
	// Diff writes a unified diff of the pending changes to paths (all when
	// none) to w.
	Diff(ctx context.Context, paths []string, w io.Writer) error
	// Content opens the new content of one pending file.
	Content(ctx context.Context, path string) (io.ReadCloser, changes.Entry, error)
	// Apply carries pending changes (all when paths is empty) into the
	// folder as one checkpoint; force applies conflicting ones too.
	Apply(ctx context.Context, paths []string, force bool) (changes.ApplyResult, error)
	// Discard drops pending changes (all when paths is empty).
	Discard(ctx context.Context, paths []string) ([]string, error)
	// Checkpoints lists the applications Undo can take back, newest first.
	Checkpoints(ctx context.Context) (CheckpointList, error)
	// Undo restores the folder to before checkpoint id ("" the newest).
	Undo(ctx context.Context, id string) (changes.Checkpoint, error)
}

// SecretInfo describes one secret without its value.
type SecretInfo struct {
	settings.Secret
	// Available says whether the gate has the value now; Problem says why
	// not.
	Available bool   `json:"available"`
	Problem   string `json:"problem,omitempty"`
	// Note is a remark for the user about where the value is kept.
	Note string `json:"note,omitempty"`
}

// SecretRequest adds or replaces a secret. Exactly one of Value, FromEnv
// and FromFile is set.
type SecretRequest struct {
	Name   string   `json:"name"`
	Hosts  []string `json:"hosts"`
	Header string   `json:"header,omitempty"`
	// Value is kept in the OS keychain (in memory when there is none).
	Value string `json:"value,omitempty"`
	// FromEnv names an environment variable of the Airlock service.
	FromEnv string `json:"from_env,omitempty"`
	// FromFile is an absolute path the service reads the value from.
	FromFile string `json:"from_file,omitempty"`
}

// Status is a snapshot of the service.
type Status struct {
	Session  session.Status    `json:"session"`
	Settings settings.Settings `json:"settings"`
	// Limits are the machine sizes this host allows (SetMachine).
	Limits       MachineLimits `json:"limits"`
	RunningTasks int           `json:"running_tasks"`
	StateDir     string        `json:"state_dir"`
	// CacheDir holds what Airlock can rebuild: the machine templates
	// (templates/), the last console log and image checksums.
	CacheDir     string `json:"cache_dir"`
	SettingsPath string `json:"settings_path"`
	Version      string `json:"version,omitempty"`
}

// RunRequest asks for one task. Exactly one of Argv and Shell is set.
type RunRequest struct {
	Argv  []string `json:"argv,omitempty"`
	Shell string   `json:"shell,omitempty"`
	// Env entries are KEY=VALUE; their values are never stored.
	Env  []string `json:"env,omitempty"`
	Cwd  string   `json:"cwd,omitempty"`
	Root bool     `json:"root,omitempty"`
	// Timeout ends the task (state timed-out) after this long; 0 is none.
	Timeout time.Duration `json:"timeout_ns,omitempty"`
	// Stdin is given to the task whole, then closed; nil means /dev/null.
	Stdin []byte `json:"stdin,omitempty"`
	// Secrets names secrets the task gets as NAME=<placeholder>.
	Secrets []string `json:"secrets,omitempty"`
}

// MaxStdin bounds RunRequest.Stdin.
const MaxStdin = 64 << 20
