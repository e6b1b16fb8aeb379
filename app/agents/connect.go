package agents

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/airlock-sandbox/airlock/internal/atomicfile"
)

// MaxFile bounds the configuration file Airlock reads (Claude Code's
// ~/.claude.json holds its history and grows to megabytes).
const MaxFile = 64 << 20

// BackupSuffix names the copy kept of a file before Airlock first changes
// it: <file>.airlock-backup, beside it.
const BackupSuffix = ".airlock-backup"

// Status is what Airlock knows of one agent on this machine.
type Status struct {
	Agent
	// Path is the agent's configuration file.
	Path string `json:"path"`
	// Found says whether the agent is on this machine (its folder or file
	// exists, or its program is on PATH).
	Found bool `json:"found"`
	// Connected says whether the file has Airlock's entry, running this
	// Airlock's program.
	Connected bool `json:"connected"`
	// Other says whether the file has an entry named airlock that runs
	// something else (another copy of Airlock, or the user's own).
	Other bool `json:"other,omitempty"`
	// Error says why the file could not be read, if it could not.
	Error string `json:"error,omitempty"`
}

// Result is what Connect or Disconnect did.
type Result struct {
	Path string `json:"path"`
	// Changed is false when the file already said what was asked.
	Changed bool `json:"changed"`
	// Backup is the copy of the file made before this change, if one was
	// made now (only the first change of a file makes one).
	Backup string `json:"backup,omitempty"`
}

// Status reports agent a on h for entry e.
func (h Host) Status(a Agent, e Entry) Status {
	st := Status{Agent: a, Path: a.path(h), Found: h.found(a)}
	src, _, err := readConfig(st.Path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return st
	case err != nil:
		st.Error = err.Error()
		return st
	}
	out, err := a.edit(src, e, false)
	if err != nil {
		st.Error = fmt.Sprintf("%s: %v", st.Path, err)
		return st
	}
	if bytes.Equal(out, src) {
		st.Connected = true
		return st
	}
	// The entry is missing or runs something else: it is someone else's
	// when removing it would change the file.
	if rm, err := a.edit(src, e, true); err == nil && !bytes.Equal(rm, src) {
		st.Other = true
	}
	return st
}

// Statuses reports every agent on h.
func (h Host) Statuses(e Entry) []Status {
	out := make([]Status, len(all))
	for i, a := range all {
		out[i] = h.Status(a, e)
	}
	return out
}

// Print returns the entry as it would be added to a's file: a file that
// holds only it.
func Print(a Agent, e Entry) []byte {
	out, err := a.edit(nil, e, false)
	if err != nil {
		// Editing nothing cannot fail: it is a bug if it does.
		panic(fmt.Sprintf("agents: printing %s: %v", a.Name, err))
	}
	return out
}

// Connect adds (or updates) Airlock's entry in a's file on h. It refuses an
// agent that is not on this machine (ErrNotFound).
func (h Host) Connect(a Agent, e Entry) (Result, error) {
	path := a.path(h)
	if !h.found(a) {
		what := "no " + a.marker(h)
		if a.command != "" {
			what += " and no " + a.command + " command on PATH"
		}
		return Result{Path: path}, fmt.Errorf("%s was %w (%s); install it and open it once, or run `airlock connect --print %s` to see the entry and add it yourself", a.Title, ErrNotFound, what, a.Name)
	}
	return rewrite(path, func(src []byte) ([]byte, error) { return a.edit(src, e, false) })
}

// Disconnect removes the entry named airlock from a's file on h, whatever
// it runs. A missing file or entry is no change.
func (h Host) Disconnect(a Agent) (Result, error) {
	path := a.path(h)
	return rewrite(path, func(src []byte) ([]byte, error) { return a.edit(src, Entry{}, true) })
}

// edit returns src with the entry for e added, or with the entry removed.
func (a Agent) edit(src []byte, e Entry, remove bool) ([]byte, error) {
	if a.format == formatTOML {
		return editTOML(src, []string{a.container, ServerName}, a.fields(e), remove)
	}
	return editJSON(src, a.format == formatJSON, []string{a.container, ServerName}, a.fields(e), remove)
}

// readConfig reads path (through symbolic links) up to MaxFile, with its
// mode.
func readConfig(path string) ([]byte, fs.FileMode, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	if !fi.Mode().IsRegular() {
		return nil, 0, fmt.Errorf("%s is not a regular file", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxFile+1))
	if err != nil {
		return nil, 0, err
	}
	if len(b) > MaxFile {
		return nil, 0, fmt.Errorf("%s is larger than %d MiB; Airlock does not edit it", path, MaxFile>>20)
	}
	return b, fi.Mode().Perm(), nil
}

// rewrite applies edit to the file at path: a file that does not parse is
// left as it is, an edit that changes nothing writes nothing, the first
// change keeps a backup beside the file, and the file is replaced
// atomically with its mode kept. A missing file is created (0600, in
// folders made 0700), unless the edit leaves it empty-handed.
func rewrite(path string, edit func([]byte) ([]byte, error)) (Result, error) {
	res := Result{Path: path}
	// Edit the file a symbolic link points to, so that the link stays.
	target := path
	if t, err := filepath.EvalSymlinks(path); err == nil {
		target = t
	}
	src, perm, err := readConfig(target)
	exists := err == nil
	switch {
	case errors.Is(err, fs.ErrNotExist):
		perm = 0o600
	case err != nil:
		return res, err
	}
	out, err := edit(src)
	if err != nil {
		return res, fmt.Errorf("%s: %w; it was left as it is", path, err)
	}
	if bytes.Equal(out, src) {
		return res, nil
	}
	if exists {
		backup := target + BackupSuffix
		if _, err := os.Lstat(backup); errors.Is(err, fs.ErrNotExist) {
			if err := atomicfile.Write(backup, src, perm, atomicfile.Synced); err != nil {
				return res, fmt.Errorf("keeping a copy of %s: %w", path, err)
			}
			res.Backup = backup
		}
	} else if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
		return res, err
	}
	if err := atomicfile.Write(target, out, perm, atomicfile.Synced); err != nil {
		return res, fmt.Errorf("writing %s: %w", path, err)
	}
	res.Changed = true
	return res, nil
}
