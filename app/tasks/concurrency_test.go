package tasks

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestMain fails the package when a goroutine of this package outlives the
// tests: every store is closed by then, so followers and subscription
// watchers must all be gone.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := leakedGoroutines(5 * time.Second); leaked != "" {
			fmt.Fprintf(os.Stderr, "leaked goroutines:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// leakedGoroutines returns the stacks of goroutines running this package's
// code, other than test functions and TestMain themselves, waiting up to d
// for them to end.
func leakedGoroutines(d time.Duration) string {
	deadline := time.Now().Add(d)
	for {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var leaked []string
		for _, g := range strings.Split(string(buf), "\n\n") {
			harness := strings.Contains(g, "tasks.leakedGoroutines(") || strings.Contains(g, "\ntesting.tRunner(") || strings.Contains(g, "\ntesting.(*M).Run(")
			if strings.Contains(g, "airlock/app/tasks.") && !harness {
				leaked = append(leaked, g)
			}
		}
		if len(leaked) == 0 || time.Now().After(deadline) {
			return strings.Join(leaked, "\n\n")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestNoLeakAfterClose(t *testing.T) {
	s := newStore(t, Options{})
	task := create(t, s)
	s.Start(task.ID)
	for range 8 {
		if _, err := s.Follow(context.Background(), task.ID, 0); err != nil {
			t.Fatal(err)
		}
		s.Subscribe(context.Background(), 1)
	}
	s.Close()
	if leaked := leakedGoroutines(5 * time.Second); leaked != "" {
		t.Fatalf("goroutines left after Close:\n%s", leaked)
	}
}

// TestConcurrentWriters: 64 tasks each write 1 MiB to stdout and 256 KiB
// to stderr in uneven pieces from two goroutines, with followers and a
// subscriber running; every byte comes back in order, per stream, both by
// ReadFrom and by the followers.
func TestConcurrentWriters(t *testing.T) {
	const (
		tasks    = 64
		outBytes = 1 << 20
		errBytes = 256 << 10
	)
	s := newStore(t, Options{})
	sub := s.Subscribe(t.Context(), 1<<16)
	go func() {
		for range sub.C {
		}
	}()
	type result struct{ out, err []byte }
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		followed = map[string]*result{}
		ids      []string
	)
	for i := range tasks {
		task := create(t, s)
		ids = append(ids, task.ID)
		s.Start(task.ID)
		ch, err := s.Follow(t.Context(), task.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		r := &result{}
		followed[task.ID] = r
		wg.Add(1)
		go func() {
			defer wg.Done()
			for c := range ch {
				mu.Lock()
				if c.Stream == Stdout {
					r.out = append(r.out, c.Data...)
				} else {
					r.err = append(r.err, c.Data...)
				}
				mu.Unlock()
			}
		}()
		var writers sync.WaitGroup
		for _, w := range []struct {
			stream Stream
			n      int
		}{{Stdout, outBytes}, {Stderr, errBytes}} {
			writers.Add(1)
			go func() {
				defer writers.Done()
				p := pattern(w.n, byte(i)+byte(w.stream))
				dst := s.Stdout(task.ID)
				if w.stream == Stderr {
					dst = s.Stderr(task.ID)
				}
				for size := 1; len(p) > 0; size = size*7%(3*MaxPayload) + 1 {
					n := min(size, len(p))
					if _, err := dst.Write(p[:n]); err != nil {
						t.Error(err)
						return
					}
					p = p[n:]
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			writers.Wait()
			if _, err := s.Finish(task.ID, Exited, Exit{}, ""); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if err := sub.Err(); err != nil {
		t.Errorf("subscriber: %v", err)
	}
	for i, id := range ids {
		wantOut := sha256.Sum256(pattern(outBytes, byte(i)+byte(Stdout)))
		wantErr := sha256.Sum256(pattern(errBytes, byte(i)+byte(Stderr)))
		out, errOut := readAll(t, s, id)
		if sha256.Sum256(out) != wantOut || sha256.Sum256(errOut) != wantErr {
			t.Fatalf("task %d: log differs (%d, %d bytes)", i, len(out), len(errOut))
		}
		r := followed[id]
		if !bytes.Equal(r.out, out) || !bytes.Equal(r.err, errOut) {
			t.Fatalf("task %d: follower saw %d+%d bytes, want %d+%d", i, len(r.out), len(r.err), len(out), len(errOut))
		}
		if got := get(t, s, id).Output; got.Stdout != outBytes || got.Stderr != errBytes || got.Dropped != 0 {
			t.Fatalf("task %d: counters %+v", i, got)
		}
	}
}
