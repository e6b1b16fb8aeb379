package tasks

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestReadFromResumes(t *testing.T) {
	s := newStore(t, Options{})
	task := create(t, s)
	s.Start(task.ID)
	big := pattern(3*MaxPayload+100, 7) // four records
	mustWrite(t, s.Stdout(task.ID), []byte("a"))
	mustWrite(t, s.Stderr(task.ID), []byte("bb"))
	mustWrite(t, s.Stdout(task.ID), big)

	all, end, err := s.ReadFrom(task.ID, 0)
	if err != nil || len(all) != 6 {
		t.Fatalf("ReadFrom(0) = %d chunks, %v", len(all), err)
	}
	if end != get(t, s, task.ID).Output.LogBytes {
		t.Fatalf("end %d, LogBytes %d", end, get(t, s, task.ID).Output.LogBytes)
	}
	// Resuming at each record start yields exactly the rest.
	for i, c := range all {
		rest, next, err := s.ReadFrom(task.ID, c.Offset)
		if err != nil || len(rest) != len(all)-i || next != end {
			t.Fatalf("ReadFrom(%d) = %d chunks, next %d, %v", c.Offset, len(rest), next, err)
		}
		if rest[0].Stream != c.Stream || !bytes.Equal(rest[0].Data, c.Data) {
			t.Fatalf("chunk at %d differs", c.Offset)
		}
		if i+1 < len(all) && c.End() != all[i+1].Offset {
			t.Fatalf("End() %d, next record at %d", c.End(), all[i+1].Offset)
		}
	}
	if chunks, next, err := s.ReadFrom(task.ID, end); err != nil || len(chunks) != 0 || next != end {
		t.Fatalf("ReadFrom(end) = %d chunks, %d, %v", len(chunks), next, err)
	}
	for _, off := range []int64{-1, 1, all[2].Offset + 3, end + 1} {
		if _, _, err := s.ReadFrom(task.ID, off); !errors.Is(err, ErrOffset) {
			t.Errorf("ReadFrom(%d) = %v, want ErrOffset", off, err)
		}
	}
	var out []byte
	for _, c := range all {
		if c.Stream == Stdout {
			out = append(out, c.Data...)
		}
	}
	if !bytes.Equal(out, append([]byte("a"), big...)) {
		t.Fatal("stdout differs")
	}
}

// TestReadFromPages checks that a log larger than one answer comes back in
// pages that join up.
func TestReadFromPages(t *testing.T) {
	s := newStore(t, Options{})
	task := create(t, s)
	s.Start(task.ID)
	want := pattern(3*readLimit+12345, 3)
	mustWrite(t, s.Stdout(task.ID), want)
	var got []byte
	pages := 0
	for off := int64(0); ; pages++ {
		chunks, next, err := s.ReadFrom(task.ID, off)
		if err != nil {
			t.Fatal(err)
		}
		if len(chunks) == 0 {
			break
		}
		for _, c := range chunks {
			got = append(got, c.Data...)
		}
		off = next
	}
	if !bytes.Equal(got, want) || pages < 4 {
		t.Fatalf("%d pages, %d bytes, equal %v", pages, len(got), bytes.Equal(got, want))
	}
}

func TestFollow(t *testing.T) {
	s := newStore(t, Options{})
	task := create(t, s)
	s.Start(task.ID)
	mustWrite(t, s.Stdout(task.ID), []byte("before "))
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	ch, err := s.Follow(ctx, task.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	first := <-ch
	if string(first.Data) != "before " {
		t.Fatalf("first chunk %q", first.Data)
	}
	// A second follower starts after the first chunk.
	ch2, err := s.Follow(ctx, task.ID, first.End())
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for i := range 100 {
			s.Stdout(task.ID).Write([]byte{byte('0' + i%10)})
			if i%10 == 0 {
				time.Sleep(time.Millisecond)
			}
		}
		s.Stderr(task.ID).Write([]byte("!"))
		s.Finish(task.ID, Exited, Exit{}, "")
	}()
	collect := func(ch <-chan Chunk) string {
		var b strings.Builder
		for c := range ch { // ends because the task ends
			b.Write(c.Data)
		}
		return b.String()
	}
	want := strings.Repeat("0123456789", 10) + "!"
	if got := collect(ch); got != want {
		t.Fatalf("follower 1 got %q", got)
	}
	if got := collect(ch2); got != want {
		t.Fatalf("follower 2 got %q", got)
	}
	// Following a finished task replays it and ends.
	ch3, _ := s.Follow(ctx, task.ID, 0)
	if got := collect(ch3); got != "before "+want {
		t.Fatalf("replay got %q", got)
	}
}

func TestFollowEndsWithContext(t *testing.T) {
	s := newStore(t, Options{})
	task := create(t, s)
	ctx, cancel := context.WithCancel(t.Context())
	ch, err := s.Follow(ctx, task.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case _, ok := <-ch:
		if ok {
			t.Fatal("chunk from an empty log")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("follower did not end with its context")
	}
	if _, err := s.Follow(ctx, task.ID, 5); !errors.Is(err, ErrOffset) {
		t.Fatalf("Follow past the end = %v", err)
	}
}

// flakyFile fails writes while full is set, writing part of the data first
// like a file system that runs out of space mid-write.
type flakyFile struct {
	f          *os.File
	full       bool
	noTruncate bool
}

func (f *flakyFile) Write(p []byte) (int, error) {
	if f.full {
		n, _ := f.f.Write(p[:len(p)/2])
		return n, syscall.ENOSPC
	}
	return f.f.Write(p)
}

func (f *flakyFile) Truncate(n int64) error {
	if f.noTruncate {
		return syscall.EIO
	}
	return f.f.Truncate(n)
}

func (f *flakyFile) Close() error { return f.f.Close() }

func withFlakyLogs(s *Store) *flakyFile {
	ff := &flakyFile{}
	s.openLog = func(path string) (logFile, error) {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		ff.f = f
		return ff, err
	}
	return ff
}

func TestDiskFull(t *testing.T) {
	dir := t.TempDir()
	s := openIn(t, dir, Options{})
	ff := withFlakyLogs(s)
	task := create(t, s)
	s.Start(task.ID)
	w := s.Stdout(task.ID)
	mustWrite(t, w, []byte("kept1 "))
	ff.full = true
	mustWrite(t, w, []byte("lost while the disk is full")) // no error: the task goes on
	ff.full = false
	mustWrite(t, w, []byte("kept2"))
	got, err := s.Finish(task.ID, Exited, Exit{Code: 0}, "")
	if err != nil || got.State != Exited {
		t.Fatalf("Finish = %v, %v", got.State, err)
	}
	if got.Output.Dropped != 27 || !strings.Contains(got.Output.Error, "no space") {
		t.Fatalf("output %+v", got.Output)
	}
	if out, _ := readAll(t, s, task.ID); string(out) != "kept1 kept2" {
		t.Fatalf("log holds %q", out)
	}
	s.Close()
	s2 := openIn(t, dir, Options{})
	if again := get(t, s2, task.ID); again.Output != got.Output || again.State != Exited {
		t.Fatalf("after reopen %+v", again)
	}
}

// TestDiskFullNoTruncate: when the damaged tail cannot be cut, logging stops
// (so no good record lands behind a bad one) but the task carries on.
func TestDiskFullNoTruncate(t *testing.T) {
	dir := t.TempDir()
	s := openIn(t, dir, Options{})
	ff := withFlakyLogs(s)
	task := create(t, s)
	s.Start(task.ID)
	mustWrite(t, s.Stdout(task.ID), []byte("kept"))
	ff.full, ff.noTruncate = true, true
	mustWrite(t, s.Stdout(task.ID), []byte("torn"))
	ff.full = false
	mustWrite(t, s.Stderr(task.ID), []byte("after"))
	got, _ := s.Finish(task.ID, Exited, Exit{}, "")
	if got.Output.Dropped != 9 || got.Output.Stdout != 4 {
		t.Fatalf("output %+v", got.Output)
	}
	if out, errOut := readAll(t, s, task.ID); string(out) != "kept" || len(errOut) != 0 {
		t.Fatalf("log holds %q %q", out, errOut)
	}
	// The file still has the torn half record past LogBytes; reopening cuts it.
	s.Close()
	s2 := openIn(t, dir, Options{})
	if fi, _ := os.Stat(s2.logPath(task.ID)); fi.Size() != got.Output.LogBytes {
		t.Fatalf("log %d bytes after reopen, want %d", fi.Size(), got.Output.LogBytes)
	}
}

func TestMetadataWriteFails(t *testing.T) {
	s := newStore(t, Options{})
	task := create(t, s)
	failing := true
	s.writeMeta = failingMeta(s, &failing)
	got, err := s.Start(task.ID)
	if err != nil || got.State != Running || got.Output.Error == "" {
		t.Fatalf("Start = %+v, %v; want running with the error noted", got, err)
	}
	failing = false
	if err := s.Close(); err != nil { // retries the pending write
		t.Fatal(err)
	}
	b, _ := os.ReadFile(s.metaPath(task.ID))
	if !bytes.Contains(b, []byte(`"state": "running"`)) {
		t.Fatalf("metadata not rewritten on Close:\n%s", b)
	}
}

// A finished task whose final metadata could not be written (full disk)
// is written again once there is room, not only on Close: a crash after
// that must not bring it back as lost.
func TestMetadataRetriedWhenThereIsRoom(t *testing.T) {
	dir := t.TempDir()
	s := openIn(t, dir, Options{})
	task := create(t, s)
	s.Start(task.ID)
	failing := true
	s.writeMeta = failingMeta(s, &failing)
	if got, _ := s.Finish(task.ID, Exited, Exit{Code: 3}, ""); got.Output.Error == "" {
		t.Fatalf("the failed write was not noted: %+v", got)
	}
	failing = false
	create(t, s) // a write that succeeds
	// A crash now: the store is not closed, another one opens the folder.
	s2 := openIn(t, dir, Options{})
	if got, err := s2.Get(task.ID); err != nil || got.State != Exited || got.Exit.Code != 3 {
		t.Fatalf("after a crash: %+v, %v; want exited 3", got, err)
	}
}

func TestWriteAfterFinish(t *testing.T) {
	s := newStore(t, Options{})
	task := create(t, s)
	s.Start(task.ID)
	s.Finish(task.ID, Killed, Exit{Signal: 9}, "cancelled")
	if _, err := io.WriteString(s.Stdout(task.ID), "late"); !errors.Is(err, ErrFinal) {
		t.Fatalf("late write = %v", err)
	}
	if n, err := s.Stdout(task.ID).Write(nil); n != 0 || err != nil {
		t.Fatalf("empty write = %d, %v", n, err)
	}
}

// failingMeta is a metadata writer that fails with ENOSPC while *failing.
func failingMeta(s *Store, failing *bool) func(*task, []byte) error {
	return func(t *task, data []byte) error {
		if *failing {
			return syscall.ENOSPC
		}
		return s.metaWrite(t, data)
	}
}

// A task's log stops at Options.MaxTaskBytes: a note on stderr ends it,
// the task is marked truncated, and later writes succeed (the task is not
// blocked or ended) while their bytes are dropped.
func TestPerTaskLogBound(t *testing.T) {
	const limit = 64 << 10
	dir := t.TempDir()
	s := openIn(t, dir, Options{MaxTaskBytes: limit})
	task := create(t, s)
	s.Start(task.ID)
	chunk := bytes.Repeat([]byte("x"), 1000)
	written := 0
	for range 1000 { // 1 MB, sixteen times the bound
		mustWrite(t, s.Stdout(task.ID), chunk)
		written += len(chunk)
	}
	got := get(t, s, task.ID)
	if !got.Output.Truncated || got.Output.LogBytes > limit {
		t.Fatalf("output %+v; want truncated within %d bytes", got.Output, limit)
	}
	if got.Output.Stdout+got.Output.Dropped != int64(written) {
		t.Errorf("stdout %d + dropped %d != written %d", got.Output.Stdout, got.Output.Dropped, written)
	}
	if fi, err := os.Stat(s.logPath(task.ID)); err != nil || fi.Size() != got.Output.LogBytes {
		t.Errorf("log file: %v, %v; want %d bytes", fi, err, got.Output.LogBytes)
	}
	var last Chunk
	for off := int64(0); ; {
		cs, next, err := s.ReadFrom(task.ID, off)
		if err != nil {
			t.Fatal(err)
		}
		if len(cs) == 0 {
			break
		}
		last, off = cs[len(cs)-1], next
	}
	if last.Stream != Stderr || !strings.Contains(string(last.Data), "passed its limit of 64 KiB") {
		t.Errorf("last record %s %q; want the note on stderr", last.Stream, last.Data)
	}
	if _, err := s.Finish(task.ID, Exited, Exit{}, ""); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = openIn(t, dir, Options{MaxTaskBytes: limit})
	if got := get(t, s, task.ID); !got.Output.Truncated || got.Output.Dropped == 0 {
		t.Errorf("after reopening: %+v", got.Output)
	}
}
