package tasks

import (
	"errors"
	"os"
	"testing"
)

// finished creates a task that wrote n bytes and ended.
func finished(t *testing.T, s *Store, n int) string {
	t.Helper()
	task := create(t, s)
	s.Start(task.ID)
	if n > 0 {
		mustWrite(t, s.Stdout(task.ID), pattern(n, 1))
	}
	if _, err := s.Finish(task.ID, Exited, Exit{}, ""); err != nil {
		t.Fatal(err)
	}
	return task.ID
}

func ids(s *Store) map[string]bool {
	m := map[string]bool{}
	for _, t := range s.List() {
		m[t.ID] = true
	}
	return m
}

func TestRetentionByCount(t *testing.T) {
	s := newStore(t, Options{MaxTasks: 3})
	a := finished(t, s, 10)
	live := create(t, s) // older than the rest, but queued: never dropped
	s.Start(live.ID)
	b := finished(t, s, 10)
	c := finished(t, s, 10)
	have := ids(s)
	if len(have) != 3 || have[a] || !have[live.ID] || !have[b] || !have[c] {
		t.Fatalf("kept %v; want the live task, %s and %s", have, b, c)
	}
	if _, err := os.Stat(s.metaPath(a)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("dropped task's metadata remains: %v", err)
	}
	if _, err := os.Stat(s.logPath(a)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("dropped task's log remains: %v", err)
	}
	if _, _, err := s.ReadFrom(a, 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ReadFrom dropped task = %v", err)
	}
	// More live tasks than the limit: nothing live goes, the finished do.
	l2, l3 := create(t, s), create(t, s)
	d := finished(t, s, 0)
	have = ids(s)
	if !have[live.ID] || !have[l2.ID] || !have[l3.ID] || len(have) != 3 {
		t.Fatalf("kept %v; want only the three live tasks (dropped %s)", have, d)
	}
}

// TestRetentionOrder: the task that ended first goes first, even when it was
// created later.
func TestRetentionOrder(t *testing.T) {
	s := newStore(t, Options{MaxTasks: 2})
	long := create(t, s)
	s.Start(long.ID)
	short := finished(t, s, 0)
	s.Finish(long.ID, Exited, Exit{}, "")
	newer := finished(t, s, 0)
	have := ids(s)
	if have[short] || !have[long.ID] || !have[newer] {
		t.Fatalf("kept %v; want %s dropped", have, short)
	}
}

func TestRetentionByBytes(t *testing.T) {
	per := int64(recordsLen(1000))
	s := newStore(t, Options{MaxBytes: 3 * per})
	var all []string
	for range 5 {
		all = append(all, finished(t, s, 1000))
	}
	have := ids(s)
	if len(have) != 3 || have[all[0]] || have[all[1]] || !have[all[4]] {
		t.Fatalf("kept %v of %v", have, all)
	}
	// A running task over the whole budget pushes out every finished one
	// when something ends, but is itself kept.
	big := create(t, s)
	s.Start(big.ID)
	mustWrite(t, s.Stdout(big.ID), pattern(int(4*per), 2))
	finished(t, s, 1)
	if have := ids(s); len(have) != 1 || !have[big.ID] {
		t.Fatalf("kept %v; want only the running task", have)
	}
}

func TestRetentionOnOpen(t *testing.T) {
	dir := t.TempDir()
	s := openIn(t, dir, Options{})
	for range 4 {
		finished(t, s, 10)
	}
	s.Close()
	s2 := openIn(t, dir, Options{MaxTasks: 2})
	if n := len(s2.List()); n != 2 {
		t.Fatalf("%d tasks after reopening with a limit of 2", n)
	}
	if n := len(dirNamesList(t, dir)); n != 4 {
		t.Fatalf("%d files, want 4", n)
	}
}

func dirNamesList(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}
