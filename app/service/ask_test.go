package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/app/egress"
)

// A task asking for thousands of hosts makes one question listing them (up
// to MaxAskHosts; the rest are refused at once), answered once; and the
// questions of a sandbox are bounded however many tasks ask.
func TestAskFloodIsOneQuestion(t *testing.T) {
	s := &Service{log: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ui, stop := context.WithCancel(ctx)
	defer stop()
	s.asks.subscribe(ui, true)
	d := askDecider{s}

	const flood = 2000
	verdicts := make(chan egress.Verdict, flood)
	refused := 0
	var wg sync.WaitGroup
	for i := range flood {
		req := egress.Request{Task: "flood", Protocol: egress.ProtoConnect, Host: fmt.Sprintf("h%d.test", i), Port: 443}
		if i < MaxAskHosts {
			wg.Go(func() { v, _ := d.Decide(ctx, req); verdicts <- v })
			continue
		}
		// Past the bound a question is refused at once, without waiting.
		waitAsks(t, s, func(as []Ask) bool { return len(as) == 1 && len(as[0].More) == MaxAskHosts-1 })
		if v, err := d.Decide(ctx, req); v != egress.Deny || err == nil {
			t.Fatalf("destination %d past the bound: %v, %v", i, v, err)
		}
		refused++
	}
	as, _ := s.Asks(ctx)
	if len(as) != 1 || as[0].Task != "flood" || len(as[0].More) != MaxAskHosts-1 {
		t.Fatalf("%d questions pending; want one listing %d destinations", len(as), MaxAskHosts)
	}
	if err := s.Answer(ctx, as[0].ID, VerdictAllowOnce); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(verdicts)
	n := 0
	for v := range verdicts {
		if v != egress.AllowOnce {
			t.Fatalf("a waiting destination got %v", v)
		}
		n++
	}
	if n != MaxAskHosts || refused != flood-MaxAskHosts {
		t.Errorf("%d answered, %d refused", n, refused)
	}

	// Many tasks: at most MaxPendingAsks questions wait at once.
	short, cancelShort := context.WithTimeout(ctx, 2*time.Second)
	defer cancelShort()
	var wg2 sync.WaitGroup
	for i := range MaxPendingAsks + 20 {
		wg2.Go(func() {
			d.Decide(short, egress.Request{Task: fmt.Sprintf("task%d", i), Protocol: egress.ProtoHTTP, Host: "x.test", Port: 80})
		})
	}
	waitAsks(t, s, func(as []Ask) bool { return len(as) == MaxPendingAsks })
	wg2.Wait()
	if as, _ := s.Asks(ctx); len(as) != 0 {
		t.Errorf("%d questions left after every asker gave up", len(as))
	}
}

func waitAsks(t *testing.T, s *Service, ok func([]Ask) bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		if as, _ := s.Asks(context.Background()); ok(as) {
			return
		}
	}
	as, _ := s.Asks(context.Background())
	t.Fatalf("pending questions: %d", len(as))
}

// With no window open nobody is asked, and the refusal says so; a question
// waiting when the last window closes is refused then, not when it times
// out a minute later.
func TestAskNeedsAWindow(t *testing.T) {
	s := &Service{log: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithTimeout(context.Background(), AskTimeout)
	defer cancel()
	d := askDecider{s}
	req := egress.Request{Task: "t", Protocol: egress.ProtoConnect, Host: "a.test", Port: 443}
	if v, err := d.Decide(ctx, req); v != egress.Deny || !errors.Is(err, egress.ErrNobodyToAsk) {
		t.Fatalf("no window: %v, %v", v, err)
	}

	ui, closeUI := context.WithCancel(ctx)
	s.asks.subscribe(ui, true)
	type result struct {
		v   egress.Verdict
		err error
	}
	done := make(chan result, 1)
	go func() { v, err := d.Decide(ctx, req); done <- result{v, err} }()
	waitAsks(t, s, func(as []Ask) bool { return len(as) == 1 })
	start := time.Now()
	closeUI()
	r := <-done
	if r.v != egress.Deny || !errors.Is(r.err, egress.ErrNobodyToAsk) {
		t.Fatalf("window closed: %v, %v", r.v, r.err)
	}
	if waited := time.Since(start); waited > answererGrace+5*time.Second {
		t.Fatalf("released %s after the window closed", waited)
	}
	if as, _ := s.Asks(ctx); len(as) != 0 {
		t.Fatalf("%d questions left with no window", len(as))
	}
}
