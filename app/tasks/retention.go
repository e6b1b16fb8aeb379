package tasks

import (
	"container/heap"
	"errors"
	"io/fs"
	"os"
	"time"
)

// retain drops the oldest finished tasks (by end time, then creation time)
// until at most MaxTasks tasks remain and their logs total at most
// MaxBytes. Queued and running tasks are never dropped but do count, so a
// store busy with live tasks can stay over its limits until they end.
func (s *Store) retain() {
	s.mu.Lock()
	defer s.mu.Unlock()
	// Within both limits (the usual case) there is nothing to drop: say so
	// without walking and locking every task.
	if len(s.tasks) <= s.opt.MaxTasks && s.logBytes.Load() <= s.opt.MaxBytes {
		return
	}
	var (
		total    int64
		finished []candidate
	)
	for _, t := range s.tasks {
		t.mu.Lock()
		total += t.t.Output.LogBytes
		if t.t.State.Final() {
			finished = append(finished, candidate{t, t.t.Ended, t.t.Created, t.t.Output.LogBytes})
		}
		t.mu.Unlock()
	}
	count := len(s.tasks)
	if count <= s.opt.MaxTasks && total <= s.opt.MaxBytes {
		return
	}
	// Usually one task is over the limit: take the oldest off a heap
	// (linear to build) rather than sorting the whole history each time.
	h := candidates(finished)
	heap.Init(&h)
	for h.Len() > 0 && (count > s.opt.MaxTasks || total > s.opt.MaxBytes) {
		c := heap.Pop(&h).(candidate)
		s.remove(c.t)
		count--
		total -= c.bytes
	}
}

// candidate is a finished task retention may drop.
type candidate struct {
	t              *task
	ended, created time.Time
	bytes          int64
}

// candidates is a min-heap of candidates, the one that ended first on top
// (then the one created first, then by id).
type candidates []candidate

func (h candidates) Len() int { return len(h) }
func (h candidates) Less(i, j int) bool {
	a, b := h[i], h[j]
	if !a.ended.Equal(b.ended) {
		return a.ended.Before(b.ended)
	}
	if !a.created.Equal(b.created) {
		return a.created.Before(b.created)
	}
	return a.t.t.ID < b.t.t.ID
}
func (h candidates) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *candidates) Push(x any)   { *h = append(*h, x.(candidate)) }
func (h *candidates) Pop() any {
	old := *h
	c := old[len(old)-1]
	*h = old[:len(old)-1]
	return c
}

// remove deletes a final task: metadata first, so an interrupted removal
// leaves an orphan log that the next Open deletes, never a task without
// its log. Called with s.mu held, which keeps a new task from reusing the
// id while its files go.
func (s *Store) remove(t *task) {
	id := t.t.ID
	delete(s.tasks, id)
	for _, p := range []string{s.metaPath(id), s.logPath(id)} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.log.Warn("tasks: retention: remove", "task", id, "err", err)
		}
	}
	t.mu.Lock()
	snap := t.t
	s.logBytes.Add(-t.t.Output.LogBytes)
	t.notify()
	t.mu.Unlock()
	s.hub.publish(func() Event { return Event{Kind: EventRemoved, Task: snap} })
}
