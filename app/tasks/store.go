package tasks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Errors returned by the Store; check them with errors.Is.
var (
	// ErrNotFound: no task with that id (never created, or dropped by retention).
	ErrNotFound = errors.New("no such task")
	// ErrTransition: the requested state change is not legal from the current state.
	ErrTransition = errors.New("illegal state change")
	// ErrFinal: output arrived for a task that has already ended.
	ErrFinal = errors.New("task has ended")
	// ErrOffset: a read offset beyond the log or not at the start of an intact record.
	ErrOffset = errors.New("bad log offset")
	// ErrClosed: the Store was closed.
	ErrClosed = errors.New("task store closed")
	// ErrLagged ends a subscription whose reader fell a full buffer behind.
	ErrLagged = errors.New("subscriber fell behind")
)

// Defaults for Options left zero.
const (
	// DefaultMaxTasks is the default bound on kept tasks.
	DefaultMaxTasks = 1000
	// DefaultMaxBytes is the default bound on the logs' total size (1 GiB).
	DefaultMaxBytes = 1 << 30
	// DefaultMaxTaskBytes is the default bound on one task's log (256 MiB).
	DefaultMaxTaskBytes = 256 << 20
	// MinMaxTaskBytes is the smallest per-task bound: room for the note.
	MinMaxTaskBytes = 4 << 10
)

// Options configures a Store.
type Options struct {
	// MaxTasks bounds how many tasks are kept, running ones included.
	MaxTasks int
	// MaxBytes bounds the total size of all output logs.
	MaxBytes int64
	// MaxTaskBytes bounds one task's log, live or not: output past it is
	// discarded (see Output.Truncated). Retention never drops a live task,
	// so without this bound one task could fill the disk.
	MaxTaskBytes int64
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Logger receives warnings about damaged files and failed writes; env
	// values and output never reach it. slog.Default when nil.
	Logger *slog.Logger
}

// Store keeps tasks, their metadata and their output logs in one folder.
// It is safe for concurrent use.
type Store struct {
	dir  string
	opt  Options
	log  *slog.Logger
	hub  hub
	done chan struct{} // closed by Close; ends followers
	wg   sync.WaitGroup

	closed atomic.Bool
	// unsaved is set when a task's metadata could not be written (a full
	// disk); the next successful write retries them (retryUnsaved).
	unsaved atomic.Bool
	mu      sync.Mutex // guards tasks; taken before any task.mu
	tasks   map[string]*task
	// logBytes is the sum of the tasks' Output.LogBytes, so that retention
	// need not walk every task after each one ends.
	logBytes atomic.Int64

	// Seams for tests that simulate a full disk.
	openLog   func(path string) (logFile, error)
	writeMeta func(t *task, data []byte) error
}

// logFile is the part of *os.File the writer needs.
type logFile interface {
	io.Writer
	Truncate(size int64) error
	Close() error
}

// vectorWriter is a logFile that writes several buffers at once, all of
// them or an error (writev on Unix: see openAppend).
type vectorWriter interface {
	writeVec(vec [][]byte) error
}

// task is the live state behind one Task.
type task struct {
	mu    sync.Mutex
	t     Task
	file  logFile                                     // open until the task is final; nil when the log broke
	buf   []byte                                      // framing buffer, reused across writes
	vec   [][]byte                                    // a piece's headers and payloads, for a vectorWriter
	hdrs  [piecePayload / MaxPayload * headerLen]byte // a piece's record headers
	wake  chan struct{}                               // closed on the next change, when a follower waits
	ended chan struct{}                               // closed when the task becomes final; nil for tasks loaded final
	dirty bool                                        // metadata changed since the last successful write
	// meta is the metadata file, open while the task is live so that a
	// state change is one write in place (see metaWrite); nil otherwise.
	meta *os.File
}

// Open opens (creating it 0700 if needed) the store folder dir, loads the
// task history, repairs torn log tails, marks tasks that were queued or
// running when the previous process ended as Lost, and applies retention.
func Open(dir string, opt Options) (*Store, error) {
	if opt.MaxTasks <= 0 {
		opt.MaxTasks = DefaultMaxTasks
	}
	if opt.MaxBytes <= 0 {
		opt.MaxBytes = DefaultMaxBytes
	}
	if opt.MaxTaskBytes <= 0 {
		opt.MaxTaskBytes = DefaultMaxTaskBytes
	}
	opt.MaxTaskBytes = max(opt.MaxTaskBytes, MinMaxTaskBytes)
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("tasks: open: %w", err)
	}
	s := &Store{
		dir: dir, opt: opt, log: opt.Logger, done: make(chan struct{}),
		tasks: map[string]*task{}, openLog: openAppend,
	}
	s.writeMeta = s.metaWrite
	s.hub.subs = map[*Subscription]struct{}{}
	if err := s.load(); err != nil {
		return nil, fmt.Errorf("tasks: open: %w", err)
	}
	s.retain()
	return s, nil
}

// Close closes the open logs and writes pending metadata. Tasks still
// running stay so on disk and are marked Lost by the next Open. Followers
// and subscriptions end.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	close(s.done)
	s.wg.Wait()
	s.hub.closeAll()
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for _, t := range s.tasks {
		t.mu.Lock()
		if t.file != nil {
			errs = append(errs, t.file.Close())
			t.file = nil
		}
		if t.dirty {
			errs = append(errs, s.persist(t))
		}
		t.closeMeta()
		t.mu.Unlock()
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("tasks: close: %w", err)
	}
	return nil
}

// Create records a new Queued task for cmd and opens its log. The returned
// Task keeps only the names of cmd.Env; the caller keeps cmd to run it.
func (s *Store) Create(cmd Command) (Task, error) {
	if err := cmd.validate(); err != nil {
		return Task{}, fmt.Errorf("tasks: create: %w", err)
	}
	if s.closed.Load() {
		return Task{}, fmt.Errorf("tasks: create: %w", ErrClosed)
	}
	s.mu.Lock()
	id := newID()
	for s.tasks[id] != nil {
		id = newID()
	}
	t := &task{t: Task{ID: id, Command: cmd.withoutValues(), State: Queued, Created: s.opt.Now()}, ended: make(chan struct{})}
	f, err := s.openLog(s.logPath(id))
	if err == nil {
		err = s.persist(t)
		if err != nil {
			t.closeMeta()
			_ = f.Close()
			_ = os.Remove(s.metaPath(id))
			_ = os.Remove(s.logPath(id))
		}
	}
	if err != nil {
		s.mu.Unlock()
		return Task{}, fmt.Errorf("tasks: create: %w", err)
	}
	t.file = f
	s.tasks[id] = t
	s.mu.Unlock()
	s.retryUnsaved() // this task's metadata was written: there is room again

	t.mu.Lock()
	defer t.mu.Unlock()
	s.hub.publish(func() Event { return Event{Kind: EventCreated, Task: t.t} })
	return t.t, nil
}

// Start moves a Queued task to Running and starts its deadline.
func (s *Store) Start(id string) (Task, error) {
	return s.transition(id, Running, func(t *Task) {
		t.Started = s.opt.Now()
		if t.Command.Timeout > 0 {
			t.Deadline = t.Started.Add(t.Command.Timeout)
		}
	})
}

// Finish moves a task to the final state to (Exited, Killed, TimedOut or
// Lost) with its exit status and, for people, a reason. The log is closed;
// output written afterwards is refused with ErrFinal. Retention then runs.
func (s *Store) Finish(id string, to State, exit Exit, reason string) (Task, error) {
	if !to.Final() {
		return Task{}, fmt.Errorf("tasks: finish %s: %w: %q is not a final state", id, ErrTransition, to)
	}
	t, err := s.transition(id, to, func(t *Task) {
		t.Exit, t.Reason, t.Ended = exit, reason, s.opt.Now()
	})
	if err == nil {
		s.retain()
		s.retryUnsaved()
	}
	return t, err
}

// MarkLost marks every listed task that has not ended as Lost, for when the
// caller sees their VM die. Unknown and already final ids are skipped. It
// returns how many tasks it marked.
func (s *Store) MarkLost(reason string, ids ...string) int {
	n := 0
	for _, id := range ids {
		if _, err := s.transition(id, Lost, func(t *Task) { t.Reason, t.Ended = reason, s.opt.Now() }); err == nil {
			n++
		}
	}
	if n > 0 {
		s.retain()
	}
	return n
}

func (s *Store) transition(id string, to State, change func(*Task)) (Task, error) {
	t, err := s.lookup(id)
	if err != nil {
		return Task{}, fmt.Errorf("tasks: %s %s: %w", to, id, err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	from := t.t.State
	if !from.CanBecome(to) {
		return t.t, fmt.Errorf("tasks: %s %s: %w: %s → %s", to, id, ErrTransition, from, to)
	}
	t.t.State = to
	change(&t.t)
	if to.Final() && t.file != nil {
		if err := t.file.Close(); err != nil {
			s.noteError(t, fmt.Errorf("close log: %w", err))
		}
		t.file, t.buf = nil, nil
	}
	// A metadata write error is recorded in the task, not returned: the
	// state change happened and is kept in memory; Close retries the write.
	_ = s.persist(t)
	if to.Final() {
		t.closeMeta() // later writes (retries) replace the file whole
		if t.ended != nil {
			close(t.ended)
		}
	}
	t.notify()
	s.hub.publish(func() Event { return Event{Kind: EventState, Task: t.t} })
	return t.t, nil
}

// retryUnsaved writes the metadata of tasks whose last write failed, so
// that a crash after the disk has room again does not bring them back in an
// older state (a finished task as lost). Close retries them too.
func (s *Store) retryUnsaved() {
	if !s.unsaved.CompareAndSwap(true, false) {
		return
	}
	s.mu.Lock()
	ts := make([]*task, 0, len(s.tasks))
	for _, t := range s.tasks {
		ts = append(ts, t)
	}
	s.mu.Unlock()
	for _, t := range ts {
		t.mu.Lock()
		if t.dirty {
			_ = s.persist(t) // sets unsaved again when it fails
		}
		t.mu.Unlock()
	}
}

// Get returns a snapshot of one task.
func (s *Store) Get(id string) (Task, error) {
	t, err := s.lookup(id)
	if err != nil {
		return Task{}, fmt.Errorf("tasks: get %s: %w", id, err)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.t, nil
}

// Wait blocks until the task is final, then returns it. It returns early
// with the latest snapshot and an error when ctx ends or the Store closes.
func (s *Store) Wait(ctx context.Context, id string) (Task, error) {
	t, err := s.lookup(id)
	if err != nil {
		return Task{}, fmt.Errorf("tasks: get %s: %w", id, err)
	}
	t.mu.Lock()
	snap, ended := t.t, t.ended
	t.mu.Unlock()
	if snap.State.Final() {
		return snap, nil
	}
	select {
	case <-ended:
	case <-ctx.Done():
		err = ctx.Err()
	case <-s.done:
		err = fmt.Errorf("tasks: wait %s: %w", id, ErrClosed)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.t, err
}

// List returns snapshots of every task, oldest first.
func (s *Store) List() []Task {
	s.mu.Lock()
	out := make([]Task, 0, len(s.tasks))
	for _, t := range s.tasks {
		t.mu.Lock()
		out = append(out, t.t)
		t.mu.Unlock()
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.Before(out[j].Created)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

func (s *Store) lookup(id string) (*task, error) {
	if !validID(id) {
		return nil, ErrNotFound
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if t := s.tasks[id]; t != nil {
		return t, nil
	}
	return nil, ErrNotFound
}

// noteError keeps the first storage error in the task and logs every one.
// Called with t.mu held.
func (s *Store) noteError(t *task, err error) {
	s.log.Warn("tasks: storage error", "task", t.t.ID, "err", err)
	if t.t.Output.Error == "" {
		t.t.Output.Error = err.Error()
		t.dirty = true
	}
}

// notify wakes followers waiting for a change. Called with t.mu held.
func (t *task) notify() {
	if t.wake != nil {
		close(t.wake)
		t.wake = nil
	}
}

// waitChan returns a channel closed at the next change. Called with t.mu held.
func (t *task) waitChan() <-chan struct{} {
	if t.wake == nil {
		t.wake = make(chan struct{})
	}
	return t.wake
}

func (s *Store) logPath(id string) string  { return filepath.Join(s.dir, id+".log") }
func (s *Store) metaPath(id string) string { return filepath.Join(s.dir, id+".json") }
