package tasks

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestEvents(t *testing.T) {
	s := newStore(t, Options{MaxTasks: 1})
	sub := s.Subscribe(t.Context(), 0)
	old := finished(t, s, 0)
	task := create(t, s) // drops old
	s.Start(task.ID)
	mustWrite(t, s.Stderr(task.ID), []byte("boom"))
	s.Finish(task.ID, Exited, Exit{Code: 1}, "")

	type seen struct {
		kind  EventKind
		state State
		id    string
	}
	want := []seen{
		{EventCreated, Queued, old}, {EventState, Running, old}, {EventState, Exited, old},
		{EventCreated, Queued, task.ID}, {EventState, Running, task.ID},
		{EventOutput, Running, task.ID}, {EventState, Exited, task.ID}, {EventRemoved, Exited, old},
	}
	for i, w := range want {
		ev := <-sub.C
		if got := (seen{ev.Kind, ev.Task.State, ev.Task.ID}); got != w {
			t.Fatalf("event %d = %+v, want %+v", i, got, w)
		}
		if ev.Kind == EventOutput && (ev.Stream != Stderr || ev.Offset != 0 || ev.Len != 4 || ev.Task.Output.Stderr != 4) {
			t.Fatalf("output event %+v", ev)
		}
	}
	if sub.Err() != nil {
		t.Fatalf("Err = %v while running", sub.Err())
	}
}

// TestSlowSubscriber: a subscriber that does not read is dropped with
// ErrLagged and never holds a writer up; others keep getting events.
func TestSlowSubscriber(t *testing.T) {
	s := newStore(t, Options{})
	slow := s.Subscribe(t.Context(), 4)
	fast := s.Subscribe(t.Context(), 4096) // room for every event
	task := create(t, s)
	s.Start(task.ID)
	got := make(chan int)
	go func() {
		n := 0
		for range fast.C {
			n++
		}
		got <- n
	}()
	done := make(chan struct{})
	go func() {
		for range 1000 {
			s.Stdout(task.ID).Write([]byte("x"))
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("writers blocked by a subscriber that does not read")
	}
	n := 0
	for range slow.C {
		n++
	}
	if n != 4 || !errors.Is(slow.Err(), ErrLagged) {
		t.Fatalf("slow subscriber got %d events, Err %v", n, slow.Err())
	}
	s.Close()
	if n := <-got; n < 1000 || !errors.Is(fast.Err(), ErrClosed) {
		t.Fatalf("fast subscriber got %d events, Err %v", n, fast.Err())
	}
}

func TestSubscriptionEndsWithContext(t *testing.T) {
	s := newStore(t, Options{})
	ctx, cancel := context.WithCancel(t.Context())
	sub := s.Subscribe(ctx, 1)
	cancel()
	select {
	case _, ok := <-sub.C:
		if ok {
			t.Fatal("unexpected event")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("subscription outlived its context")
	}
	if !errors.Is(sub.Err(), context.Canceled) {
		t.Fatalf("Err = %v", sub.Err())
	}
	create(t, s) // publishing to no one is fine
}
