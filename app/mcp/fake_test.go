package mcp

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/app/changes"
	"github.com/airlock-sandbox/airlock/app/egress"
	"github.com/airlock-sandbox/airlock/app/service"
	"github.com/airlock-sandbox/airlock/app/settings"
	"github.com/airlock-sandbox/airlock/app/tasks"
)

// fakeCore is a service.Core that runs nothing: Run records the request
// and makes a task whose log holds the canned output; Wait ends it with
// exit code 3 unless hold is set.
type fakeCore struct {
	mu sync.Mutex
	// output is given to each new task: stream and text per record.
	output []out
	// hold makes Wait block until the task ends or its context is done.
	hold bool
	// lost makes Wait end the task as lost, with this reason.
	lost string
	// down is returned (wrapped) by every call while set: the service is
	// not running.
	down error
	// perCall bounds the records Logs returns per call, to exercise paging.
	perCall int

	runs      []service.RunRequest
	cancels   []string
	forbidden []string // calls no tool may make
	tasks     map[string]*fakeTask
	order     []string
	status    service.Status
	decisions []egress.Decision
	pending   []changes.Entry
	changed   chan struct{} // closed and replaced when a log or state changes
}

type out struct {
	stream tasks.Stream
	text   string
}

type fakeTask struct {
	t   tasks.Task
	log []tasks.Chunk
}

var _ service.Core = (*fakeCore)(nil)

func newFake(output ...out) *fakeCore {
	return &fakeCore{output: output, perCall: 4, tasks: map[string]*fakeTask{}, changed: make(chan struct{})}
}

// notify wakes followers; f.mu is held.
func (f *fakeCore) notify() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// appendOutput adds a record to a task's log.
func (f *fakeCore) appendOutput(id string, stream tasks.Stream, text string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ft := f.tasks[id]
	c := tasks.Chunk{Offset: ft.t.Output.LogBytes, Stream: stream, Data: []byte(text)}
	ft.log = append(ft.log, c)
	ft.t.Output.LogBytes = c.End()
	if stream == tasks.Stdout {
		ft.t.Output.Stdout += int64(len(text))
	} else {
		ft.t.Output.Stderr += int64(len(text))
	}
	f.notify()
}

// finish ends a task as exited with code.
func (f *fakeCore) finish(id string, state tasks.State, exit tasks.Exit) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ft := f.tasks[id]
	if ft.t.State.Final() {
		return
	}
	ft.t.State, ft.t.Exit, ft.t.Ended = state, exit, time.Now()
	f.notify()
}

// isDown returns the wrapped down error, if set.
func (f *fakeCore) isDown(op string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down != nil {
		return fmt.Errorf("fake: %s: %w (connect: connection refused)", op, f.down)
	}
	return nil
}

func (f *fakeCore) Run(_ context.Context, req service.RunRequest) (tasks.Task, error) {
	if err := f.isDown("run"); err != nil {
		return tasks.Task{}, err
	}
	f.mu.Lock()
	f.runs = append(f.runs, req)
	id := fmt.Sprintf("task%04d", len(f.runs))
	now := time.Now()
	ft := &fakeTask{t: tasks.Task{
		ID: id, State: tasks.Queued, Created: now,
		Command: tasks.Command{Argv: req.Argv, Shell: req.Shell, Cwd: req.Cwd, Root: req.Root, Timeout: req.Timeout},
	}}
	f.tasks[id] = ft
	f.order = append(f.order, id)
	output := f.output
	f.mu.Unlock()
	for _, o := range output {
		f.appendOutput(id, o.stream, o.text)
	}
	return ft.t, nil
}

func (f *fakeCore) Task(_ context.Context, id string) (tasks.Task, error) {
	if err := f.isDown("task"); err != nil {
		return tasks.Task{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	ft, ok := f.tasks[id]
	if !ok {
		return tasks.Task{}, fmt.Errorf("tasks: get %s: %w", id, tasks.ErrNotFound)
	}
	return ft.t, nil
}

func (f *fakeCore) Tasks(context.Context) ([]tasks.Task, error) {
	if err := f.isDown("tasks"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var ts []tasks.Task
	for _, id := range f.order {
		ts = append(ts, f.tasks[id].t)
	}
	return ts, nil
}

func (f *fakeCore) Wait(ctx context.Context, id string) (tasks.Task, error) {
	f.mu.Lock()
	hold, lost := f.hold, f.lost
	f.mu.Unlock()
	switch {
	case hold:
		for {
			f.mu.Lock()
			t, wake := f.tasks[id].t, f.changed
			f.mu.Unlock()
			if t.State.Final() {
				return t, nil
			}
			select {
			case <-wake:
			case <-ctx.Done():
				return t, ctx.Err()
			}
		}
	case lost != "":
		f.mu.Lock()
		ft := f.tasks[id]
		ft.t.State, ft.t.Reason, ft.t.Ended = tasks.Lost, lost, time.Now()
		f.notify()
		f.mu.Unlock()
	default:
		f.finish(id, tasks.Exited, tasks.Exit{Code: 3})
	}
	return f.Task(ctx, id)
}

func (f *fakeCore) Cancel(_ context.Context, id string) error {
	f.mu.Lock()
	f.cancels = append(f.cancels, id)
	f.mu.Unlock()
	f.finish(id, tasks.Killed, tasks.Exit{Signal: 15})
	return nil
}

func (f *fakeCore) cancelled() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.cancels)
}

func (f *fakeCore) Logs(_ context.Context, id string, offset int64) ([]tasks.Chunk, int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ft, ok := f.tasks[id]
	if !ok {
		return nil, offset, fmt.Errorf("tasks: read %s: %w", id, tasks.ErrNotFound)
	}
	if offset == ft.t.Output.LogBytes {
		return nil, offset, nil
	}
	i := slices.IndexFunc(ft.log, func(c tasks.Chunk) bool { return c.Offset == offset })
	if i < 0 {
		return nil, offset, fmt.Errorf("tasks: read %s: %w: no intact record at %d", id, tasks.ErrOffset, offset)
	}
	chunks := slices.Clone(ft.log[i:min(len(ft.log), i+f.perCall)])
	return chunks, chunks[len(chunks)-1].End(), nil
}

func (f *fakeCore) FollowLogs(ctx context.Context, id string, offset int64) (<-chan tasks.Chunk, error) {
	if _, err := f.Task(ctx, id); err != nil {
		return nil, err
	}
	ch := make(chan tasks.Chunk)
	go func() {
		defer close(ch)
		for {
			f.mu.Lock()
			ft, wake := f.tasks[id], f.changed
			var next []tasks.Chunk
			for _, c := range ft.log {
				if c.Offset >= offset {
					next = append(next, c)
				}
			}
			final := ft.t.State.Final()
			f.mu.Unlock()
			for _, c := range next {
				select {
				case ch <- c:
					offset = c.End()
				case <-ctx.Done():
					return
				}
			}
			if final && len(next) == 0 {
				return
			}
			select {
			case <-wake:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch, nil
}

func (f *fakeCore) Status(context.Context) (service.Status, error) {
	if err := f.isDown("status"); err != nil {
		return service.Status{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.status, nil
}

func (f *fakeCore) Settings(context.Context) (settings.Settings, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.status.Settings, nil
}

func (f *fakeCore) EgressLog(context.Context) ([]egress.Decision, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.decisions), nil
}

// The rest change the sandbox or stream events: no tool may call them.

func (f *fakeCore) forbid(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forbidden = append(f.forbidden, name)
	return fmt.Errorf("fake: %s is not for tools", name)
}

func (f *fakeCore) StartVM(context.Context) error                { return f.forbid("StartVM") }
func (f *fakeCore) StopVM(context.Context) error                 { return f.forbid("StopVM") }
func (f *fakeCore) RestartVM(context.Context) error              { return f.forbid("RestartVM") }
func (f *fakeCore) SetImage(context.Context, string, bool) error { return nil }
func (f *fakeCore) SetMachine(context.Context, int, int) error   { return nil }
func (f *fakeCore) ResetDisk(context.Context) error              { return nil }

func (f *fakeCore) SetWorkspace(context.Context, string, bool, changes.Mode) error {
	return f.forbid("SetWorkspace")
}
func (f *fakeCore) EgressRule(context.Context, string, string) (settings.Settings, error) {
	return settings.Settings{}, f.forbid("EgressRule")
}
func (f *fakeCore) FollowEgress(context.Context) (<-chan egress.Decision, error) {
	return nil, f.forbid("FollowEgress")
}
func (f *fakeCore) Events(context.Context, bool) (<-chan service.Event, error) {
	return nil, f.forbid("Events")
}

func (f *fakeCore) Asks(context.Context) ([]service.Ask, error) { return nil, f.forbid("Asks") }

// Answer is forbidden: an agent must never answer its own network asks.
func (f *fakeCore) Answer(context.Context, string, string) error { return f.forbid("Answer") }

// The secret calls are forbidden: an agent must never change credentials.
func (f *fakeCore) Secrets(context.Context) ([]service.SecretInfo, error) {
	return nil, f.forbid("Secrets")
}
func (f *fakeCore) SetSecret(context.Context, service.SecretRequest) (service.SecretInfo, error) {
	return service.SecretInfo{}, f.forbid("SetSecret")
}
func (f *fakeCore) RemoveSecret(context.Context, string) error { return f.forbid("RemoveSecret") }

// Changes lists the canned pending changes.
func (f *fakeCore) Changes(context.Context) (service.ChangesList, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return service.ChangesList{Mode: changes.Review, Entries: f.pending}, nil
}

// The change calls but Changes are forbidden: an agent must never
// approve, drop or take back its own changes.
func (f *fakeCore) Diff(context.Context, []string, io.Writer) error { return f.forbid("Diff") }
func (f *fakeCore) Content(context.Context, string) (io.ReadCloser, changes.Entry, error) {
	return nil, changes.Entry{}, f.forbid("Content")
}
func (f *fakeCore) Apply(context.Context, []string, bool) (changes.ApplyResult, error) {
	return changes.ApplyResult{}, f.forbid("Apply")
}
func (f *fakeCore) Discard(context.Context, []string) ([]string, error) {
	return nil, f.forbid("Discard")
}
func (f *fakeCore) Checkpoints(context.Context) (service.CheckpointList, error) {
	return service.CheckpointList{}, f.forbid("Checkpoints")
}
func (f *fakeCore) Undo(context.Context, string) (changes.Checkpoint, error) {
	return changes.Checkpoint{}, f.forbid("Undo")
}
