// Package changes holds what a task changed in a workspace until the user
// takes it: the guest writes to an overlay whose upper layer is a
// guest-local disk (the shared folder is its read-only lower layer), the
// host pulls that layer as a tar stream (OCI whiteouts) into a store of
// pending changes in the state folder, and applies them to the folder
// itself beneath the workspace root only (os.Root), keeping the previous
// version of every file it overwrites or deletes in a checkpoint that Undo
// restores exactly.
//
// Everything here reads what a hostile guest sent: names, sizes, modes and
// link targets are checked and bounded before anything touches the disk.
package changes

import (
	"errors"
	"io/fs"
	"time"
)

// Mode is how a workspace takes the guest's writes.
type Mode string

// Modes.
const (
	// Direct shares the folder read-write: the guest's writes land at once.
	Direct Mode = "direct"
	// Review holds every change until the user applies it.
	Review Mode = "review"
	// Auto applies what tasks changed once no task runs, each application
	// an undoable checkpoint; changes it must not apply unasked (conflicts,
	// paths the user's tools run on the host) wait for review.
	Auto Mode = "auto"
)

// ParseMode reads a mode a user typed; "" is Auto, the default.
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case "", Auto:
		return Auto, nil
	case Direct, Review:
		return Mode(s), nil
	}
	return "", errors.New(`changes mode must be "direct", "review" or "auto", not "` + s + `"`)
}

// Kind is what a pending change does to its path.
type Kind string

// Kinds.
const (
	Added    Kind = "added"
	Modified Kind = "modified"
	Deleted  Kind = "deleted"
	Renamed  Kind = "renamed" // From names the old path, whose deletion it carries
	ModeOnly Kind = "mode"    // only the permission bits changed
)

// Type is what a path names.
type Type string

// Types that a change can carry to the host; nothing else is ever created
// there (devices, fifos and sockets are refused at ingest).
const (
	File    Type = "file"
	Dir     Type = "dir"
	Symlink Type = "symlink"
)

// Entry is one pending change, as `airlock changes --json`, the control
// API and the MCP list_changes tool show it.
type Entry struct {
	// Path is slash-separated and relative to the workspace root: clean,
	// never empty, never absolute, no ".." element.
	Path string `json:"path"`
	Kind Kind   `json:"kind"`
	// From is the old path of a rename.
	From string `json:"from,omitempty"`
	// Type is the new object's type ("" for a deletion).
	Type Type `json:"type,omitempty"`
	// Mode holds the new permission bits (setuid, setgid and sticky
	// dropped).
	Mode fs.FileMode `json:"mode,omitempty"`
	// Size is the new content's size in bytes (files).
	Size int64 `json:"size"`
	// ModTime is the new content's modification time.
	ModTime time.Time `json:"mtime"`
	// Link is a symlink's target.
	Link string `json:"link,omitempty"`
	// Text is set for a text file; then LinesAdded and LinesRemoved count
	// the lines against the host's version.
	Text         bool `json:"text,omitempty"`
	LinesAdded   int  `json:"lines_added,omitempty"`
	LinesRemoved int  `json:"lines_removed,omitempty"`
	// HostRuns marks a path the user's tools run on the host (.git/config,
	// .git/hooks, .envrc, .vscode, .idea): never applied by Auto.
	HostRuns bool `json:"host_runs,omitempty"`
	// Conflict says the host's file changed after the guest could first
	// have seen it; an apply keeps the host's file and the change both.
	Conflict bool `json:"conflict,omitempty"`
}

// Checkpoint is one application, which Undo takes back.
type Checkpoint struct {
	ID      string    `json:"id"`
	Time    time.Time `json:"time"`
	Paths   []string  `json:"paths"`
	Bytes   int64     `json:"bytes"` // the previous versions it keeps
	Undone  bool      `json:"undone,omitempty"`
	Summary string    `json:"summary"` // "3 added, 1 modified, 2 deleted"
}

// Usage is the space a workspace's store takes, against its bound.
type Usage struct {
	PendingBytes    int64 `json:"pending_bytes"`
	CheckpointBytes int64 `json:"checkpoint_bytes"`
	LimitBytes      int64 `json:"limit_bytes"`
}

// Refusal is a change the store will not carry to the host, and why.
type Refusal struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// ApplyResult says what an Apply did.
type ApplyResult struct {
	// Checkpoint is the new checkpoint's id, "" when nothing was applied.
	Checkpoint string   `json:"checkpoint,omitempty"`
	Applied    []string `json:"applied"`
	// Conflicts were left pending: the host's file is untouched.
	Conflicts []string  `json:"conflicts,omitempty"`
	Refused   []Refusal `json:"refused,omitempty"`
}
