package tasks

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// clock ticks one second per reading, so every timestamp is distinct and ordered.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Second)
	return c.t
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func openIn(t *testing.T, dir string, opt Options) *Store {
	t.Helper()
	if opt.Now == nil {
		opt.Now = newClock().Now
	}
	if opt.Logger == nil {
		opt.Logger = quietLogger()
	}
	s, err := Open(dir, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newStore(t *testing.T, opt Options) *Store {
	t.Helper()
	return openIn(t, t.TempDir(), opt)
}

func create(t *testing.T, s *Store) Task {
	t.Helper()
	task, err := s.Create(Command{Argv: []string{"echo", "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	return task
}

func get(t *testing.T, s *Store, id string) Task {
	t.Helper()
	task, err := s.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	return task
}

func mustWrite(t *testing.T, w io.Writer, p []byte) {
	t.Helper()
	if n, err := w.Write(p); err != nil || n != len(p) {
		t.Fatalf("Write = %d, %v", n, err)
	}
}

// readAll reads a task's whole log, split per stream.
func readAll(t *testing.T, s *Store, id string) (stdout, stderr []byte) {
	t.Helper()
	var off int64
	for {
		chunks, next, err := s.ReadFrom(id, off)
		if err != nil {
			t.Fatal(err)
		}
		if len(chunks) == 0 {
			return stdout, stderr
		}
		for _, c := range chunks {
			if c.Stream == Stdout {
				stdout = append(stdout, c.Data...)
			} else {
				stderr = append(stderr, c.Data...)
			}
		}
		off = next
	}
}

func TestCreateValidatesAndKeepsEnvNamesOnly(t *testing.T) {
	dir := t.TempDir()
	s := openIn(t, dir, Options{})
	for _, bad := range []Command{
		{},
		{Argv: []string{"a"}, Shell: "b"},
		{Argv: []string{""}},
		{Shell: "x", Timeout: -1},
		{Shell: "x", Env: []string{"=v"}},
	} {
		if _, err := s.Create(bad); err == nil {
			t.Errorf("Create(%+v) accepted", bad)
		}
	}
	cmd := Command{Shell: "env", Env: []string{"TOKEN=s3cr3t-value", "EMPTY="}, Cwd: "/workspace/x", Root: true, TTY: true, Timeout: time.Minute}
	task, err := s.Create(cmd)
	if err != nil {
		t.Fatal(err)
	}
	if !validID(task.ID) || task.State != Queued || task.Created.IsZero() {
		t.Fatalf("task = %+v", task)
	}
	if got := strings.Join(task.Command.Env, ","); got != "TOKEN,EMPTY" {
		t.Fatalf("env = %q, want names only", got)
	}
	if cmd.Env[0] != "TOKEN=s3cr3t-value" {
		t.Fatal("Create changed the caller's Command")
	}
	task, _ = s.Start(task.ID)
	if want := task.Started.Add(time.Minute); !task.Deadline.Equal(want) {
		t.Fatalf("deadline %v, want %v", task.Deadline, want)
	}
	s.Finish(task.ID, Exited, Exit{Code: 3}, "")
	s.Close()
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if b, _ := os.ReadFile(p); bytes.Contains(b, []byte("s3cr3t")) {
			t.Errorf("%s holds an env value", p)
		}
		return nil
	})
}

func TestUnknownIDs(t *testing.T) {
	s := newStore(t, Options{})
	for _, id := range []string{"", "../../etc", "aaaaaaaa", "AAAAAAAA", "abc"} {
		if _, err := s.Get(id); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get(%q) = %v", id, err)
		}
		if _, _, err := s.ReadFrom(id, 0); !errors.Is(err, ErrNotFound) {
			t.Errorf("ReadFrom(%q) = %v", id, err)
		}
		if _, err := s.Stdout(id).Write([]byte("x")); !errors.Is(err, ErrNotFound) {
			t.Errorf("Stdout(%q).Write = %v", id, err)
		}
	}
}

// TestHistorySurvivesRestart reopens the folder: finished tasks come back
// as they were, queued and running ones come back lost with their output.
func TestHistorySurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	s := openIn(t, dir, Options{})
	done, running, queued := create(t, s), create(t, s), create(t, s)
	s.Start(done.ID)
	mustWrite(t, s.Stdout(done.ID), []byte("finished\n"))
	s.Finish(done.ID, Exited, Exit{Code: 0}, "")
	s.Start(running.ID)
	mustWrite(t, s.Stdout(running.ID), []byte("out "))
	mustWrite(t, s.Stderr(running.ID), []byte("err "))
	mustWrite(t, s.Stdout(running.ID), []byte("more"))
	before := get(t, s, done.ID)
	// No Close: the process dies; the metadata of running still says 0 bytes.

	s2 := openIn(t, dir, Options{})
	if got := get(t, s2, done.ID); !jsonEqual(got, before) {
		t.Fatalf("finished task changed:\n%+v\n%+v", got, before)
	}
	r := get(t, s2, running.ID)
	if r.State != Lost || r.Reason == "" || r.Ended.IsZero() {
		t.Fatalf("running task came back %s (%q)", r.State, r.Reason)
	}
	if r.Output.Stdout != 8 || r.Output.Stderr != 4 {
		t.Fatalf("counters %+v, want 8 and 4", r.Output)
	}
	if out, errOut := readAll(t, s2, running.ID); string(out) != "out more" || string(errOut) != "err " {
		t.Fatalf("output %q %q", out, errOut)
	}
	if q := get(t, s2, queued.ID); q.State != Lost {
		t.Fatalf("queued task came back %s", q.State)
	}
	if n := len(s2.List()); n != 3 {
		t.Fatalf("List has %d tasks", n)
	}
	// Lost is written down: a third open changes nothing.
	s3 := openIn(t, dir, Options{})
	if got := get(t, s3, running.ID); !jsonEqual(got, r) {
		t.Fatalf("third open changed the task:\n%+v\n%+v", got, r)
	}
}

func jsonEqual(a, b Task) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

// TestTornRecord simulates a crash in the middle of a write: the log ends
// with part of a record (or garbage). Reopening keeps every whole record,
// cuts the rest, and appending works again at a record boundary.
func TestTornRecord(t *testing.T) {
	whole := appendRecords(nil, Stdout, []byte("second"))
	cases := []struct {
		name string
		tail []byte
	}{
		{"half header", whole[:3]},
		{"header only", whole[:headerLen]},
		{"half payload", whole[:len(whole)-2]},
		{"bad checksum", append(append([]byte(nil), whole[:len(whole)-1]...), 'X')},
		{"zeros", make([]byte, 100)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			s := openIn(t, dir, Options{})
			task := create(t, s)
			s.Start(task.ID)
			mustWrite(t, s.Stdout(task.ID), []byte("first"))
			mustWrite(t, s.Stderr(task.ID), []byte("warn"))
			good := get(t, s, task.ID).Output.LogBytes
			f, err := os.OpenFile(s.logPath(task.ID), os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.Write(tc.tail)
			f.Close()

			s2 := openIn(t, dir, Options{})
			got := get(t, s2, task.ID)
			if got.Output.LogBytes != good || got.State != Lost {
				t.Fatalf("after reopen: %+v, want %d bytes, lost", got.Output, good)
			}
			if fi, _ := os.Stat(s2.logPath(task.ID)); fi.Size() != good {
				t.Fatalf("log is %d bytes, want cut to %d", fi.Size(), good)
			}
			if out, errOut := readAll(t, s2, task.ID); string(out) != "first" || string(errOut) != "warn" {
				t.Fatalf("output %q %q", out, errOut)
			}
		})
	}
}

func TestOpenCleansLeftovers(t *testing.T) {
	dir := t.TempDir()
	s := openIn(t, dir, Options{})
	task := create(t, s)
	s.Finish(task.ID, Killed, Exit{}, "cancelled")
	s.Close()
	os.WriteFile(filepath.Join(dir, ".abcdefgh.json.123.tmp"), []byte("{"), 0o600) // rename never happened
	os.WriteFile(filepath.Join(dir, "bcdefghi.log"), []byte("x"), 0o600)           // removal cut short
	os.WriteFile(filepath.Join(dir, "cdefghij.json"), []byte("not json"), 0o600)   // damaged: kept, skipped
	os.WriteFile(filepath.Join(dir, "cdefghij.log"), []byte("x"), 0o600)

	s2 := openIn(t, dir, Options{})
	if n := len(s2.List()); n != 1 {
		t.Fatalf("%d tasks loaded, want 1", n)
	}
	names := dirNames(t, dir)
	want := []string{task.ID + ".json", task.ID + ".log", "cdefghij.json", "cdefghij.log"}
	sort.Strings(want)
	if names != strings.Join(want, " ") {
		t.Fatalf("folder holds %q, want %q", names, want)
	}
}

func dirNames(t *testing.T, dir string) string { return strings.Join(dirNamesList(t, dir), " ") }

func TestFilePermissions(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tasks")
	s := openIn(t, dir, Options{})
	task := create(t, s)
	for p, want := range map[string]os.FileMode{dir: 0o700, s.metaPath(task.ID): 0o600, s.logPath(task.ID): 0o600} {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v %v, want %v", p, fi.Mode().Perm(), err, want)
		}
	}
}

func TestClosedStore(t *testing.T) {
	s := newStore(t, Options{})
	task := create(t, s)
	s.Start(task.ID)
	w := s.Stdout(task.ID)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("x")); !errors.Is(err, ErrClosed) {
		t.Errorf("Write after Close = %v", err)
	}
	if _, err := s.Create(Command{Shell: "x"}); !errors.Is(err, ErrClosed) {
		t.Errorf("Create after Close = %v", err)
	}
	if sub := s.Subscribe(t.Context(), 1); !errors.Is(sub.Err(), ErrClosed) {
		t.Errorf("Subscribe after Close: %v", sub.Err())
	}
}
