package tasks

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/atomicfile"
)

// metaVersion is written into every metadata file so a later format can
// tell old files apart.
const metaVersion = 1

// meta is the JSON document of one task.
type meta struct {
	Version int `json:"v"`
	Task
}

// persist writes the task's metadata. Called with t.mu held (or before t
// is shared). A failure is recorded in the task and returned.
func (s *Store) persist(t *task) error {
	data, err := json.MarshalIndent(meta{Version: metaVersion, Task: t.t}, "", "  ")
	if err == nil {
		err = s.writeMeta(t, append(data, '\n'))
	}
	if err != nil {
		t.dirty = true
		s.unsaved.Store(true)
		s.noteError(t, fmt.Errorf("write metadata: %w", err))
		return err
	}
	t.dirty = false
	return nil
}

// metaPage is the size of a live task's metadata file: one page, so that a
// state change is a single write(2) of one page at offset 0, which the
// process dying cannot tear (the kernel checks for a fatal signal between
// pages, not within one).
const metaPage = 4096

// metaWrite writes a task's metadata document. A live task's document goes
// into its metadata file in place: one write of the whole page, the
// document padded with spaces (JSON allows trailing white space). That
// costs no file creation, rename or journal wait per state change, which
// on a busy disk took milliseconds of the task round trip. The file is
// created once, at Create, and stays open until the task is final.
//
// Against a crash of this process, which the store is built for, the page
// holds the old document or the new one. A power loss may tear it; Open
// then skips the task (as it would a damaged file) and keeps its log. A
// document that does not fit a page (a very long command line) and every
// write after the task ended replace the file atomically instead.
func (s *Store) metaWrite(t *task, data []byte) error {
	path := s.metaPath(t.t.ID)
	if len(data) > metaPage {
		t.closeMeta()
		return writeFileAtomic(path, data)
	}
	page := make([]byte, metaPage)
	copy(page, data)
	for i := len(data); i < metaPage-1; i++ {
		page[i] = ' '
	}
	page[metaPage-1] = '\n'
	if t.meta == nil {
		if t.t.State != Queued {
			// Loaded or rewritten whole: never open a file another
			// document may be being renamed over; replace it.
			return writeFileAtomic(path, data)
		}
		// A new task: the file does not exist yet. A crash between the
		// create and the write leaves it empty, which Open deletes.
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return err
		}
		t.meta = f
	}
	if _, err := t.meta.WriteAt(page, 0); err != nil {
		// The page may be torn (a full disk can cut a write short):
		// later writes replace the file whole.
		t.closeMeta()
		return err
	}
	return nil
}

// closeMeta closes the live metadata file, if open. Called with t.mu held.
func (t *task) closeMeta() {
	if t.meta != nil {
		_ = t.meta.Close()
		t.meta = nil
	}
}

// writeFileAtomic replaces path by way of a temporary file in the same
// folder and a rename, so a reader (or the next Open after a crash) sees
// the old document or the new one, never a mix. There is no fsync: the
// rename is atomic against a crash of this process, which is the failure
// the store is built for; a power loss may lose recent changes.
func writeFileAtomic(path string, data []byte) error {
	return atomicfile.Write(path, data, 0o600, atomicfile.Unsynced)
}

// load reads every task of the folder. Leftover temporary files and logs
// without metadata (a removal or creation cut short) are deleted; a
// metadata file that cannot be read is logged and left alone.
func (s *Store) load() error {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return err
	}
	hasMeta := map[string]bool{}
	for _, e := range entries {
		name := e.Name()
		switch {
		case strings.HasPrefix(name, ".") && strings.HasSuffix(name, ".tmp"):
			_ = os.Remove(filepath.Join(s.dir, name))
		case strings.HasSuffix(name, ".json"):
			id := strings.TrimSuffix(name, ".json")
			t, err := s.loadTask(id)
			if errors.Is(err, errCutShort) {
				_ = os.Remove(filepath.Join(s.dir, name))
				continue // its log goes too, as one without metadata
			}
			hasMeta[id] = true
			if err != nil {
				s.log.Warn("tasks: skipping unreadable task", "file", name, "err", err)
				continue
			}
			s.tasks[id] = t
			s.logBytes.Add(t.t.Output.LogBytes)
		}
	}
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".log")
		if ok && validID(id) && !hasMeta[id] {
			_ = os.Remove(filepath.Join(s.dir, e.Name()))
		}
	}
	return nil
}

// errCutShort: an empty metadata file, left by a crash between creating a
// task's files and writing its first document.
var errCutShort = errors.New("empty metadata: creation cut short")

func (s *Store) loadTask(id string) (*task, error) {
	if !validID(id) {
		return nil, errors.New("not a task id")
	}
	data, err := os.ReadFile(s.metaPath(id))
	if err != nil {
		return nil, err
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errCutShort
	}
	var m meta
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	if m.Version != metaVersion || m.ID != id || !m.State.Valid() {
		return nil, fmt.Errorf("version %d, id %q, state %q: not a task of this format", m.Version, m.ID, m.State)
	}
	t := &task{t: m.Task}
	modified := s.repairLog(t)
	if !t.t.State.Final() {
		ended := s.opt.Now()
		if !modified.IsZero() && modified.After(t.t.Created) {
			ended = modified // the last output is the best guess of when it died
		}
		t.t.State, t.t.Ended = Lost, ended
		t.t.Reason = "Airlock stopped while the task was " + string(m.State) + "; its VM is gone"
		t.dirty = true
	}
	if t.dirty {
		_ = s.persist(t)
	}
	return t, nil
}

// repairLog brings the metadata's counters up to date with the log file
// and cuts a torn or damaged tail back to the last intact record. The
// metadata's LogBytes was true when written, so only what follows it is
// scanned; a log shorter than that (only a power loss can do it) is
// rescanned from the start. It returns the log's modification time.
func (s *Store) repairLog(t *task) time.Time {
	path := s.logPath(t.t.ID)
	out := &t.t.Output
	fi, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) && out.LogBytes == 0 {
			return time.Time{}
		}
		s.noteError(t, fmt.Errorf("log: %w", err))
		out.LogBytes, out.Stdout, out.Stderr = 0, 0, 0
		t.dirty = true
		return time.Time{}
	}
	size := fi.Size()
	if size == out.LogBytes {
		return fi.ModTime()
	}
	if size < out.LogBytes || out.LogBytes < 0 {
		s.noteError(t, fmt.Errorf("log: %d bytes, %d expected; the end was lost", size, out.LogBytes))
		out.LogBytes, out.Stdout, out.Stderr = 0, 0, 0
	}
	t.dirty = true
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		s.noteError(t, fmt.Errorf("log: %w", err))
		return fi.ModTime()
	}
	defer f.Close()
	off := out.LogBytes
	for off < size {
		chunks, next, bad, err := scanRecords(f, off, size)
		if err != nil {
			s.noteError(t, fmt.Errorf("log: %w", err))
			break
		}
		for _, c := range chunks {
			if c.Stream == Stdout {
				out.Stdout += int64(len(c.Data))
			} else {
				out.Stderr += int64(len(c.Data))
			}
		}
		progress := next > off
		off = next
		if bad || !progress {
			break
		}
	}
	out.LogBytes = off
	if off < size {
		s.log.Warn("tasks: cutting a torn log tail", "task", t.t.ID, "kept", off, "dropped", size-off)
		if err := f.Truncate(off); err != nil {
			s.noteError(t, fmt.Errorf("log: cut torn tail: %w", err))
		}
	}
	return fi.ModTime()
}
