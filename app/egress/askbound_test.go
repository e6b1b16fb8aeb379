package egress

import (
	"context"
	"fmt"
	"testing"
)

// A question outlives the connection that raised it: a guest dropping
// connections to ever new hosts cannot queue more than maxOpenAsks.
func TestOpenAsksBounded(t *testing.T) {
	release := make(chan struct{})
	dec := &funcDecider{f: func(ctx context.Context, r Request) (Verdict, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return Deny, nil
	}}
	g, err := New(Config{Decider: dec})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	defer close(release)
	gone, cancel := context.WithCancel(context.Background())
	cancel() // each client leaves at once; its question stays open
	for i := range maxOpenAsks + 50 {
		g.ask(gone, Request{Task: "flood", Protocol: ProtoSOCKS, Host: fmt.Sprintf("h%d.test", i), Port: 443})
	}
	v, reason, err := g.ask(context.Background(), Request{Task: "flood", Protocol: ProtoSOCKS, Host: "one-more.test", Port: 443})
	if v != Deny || reason != ReasonAskFailed || err == nil {
		t.Fatalf("question past the bound: %v %s %v", v, reason, err)
	}
	g.asks.mu.Lock()
	open := len(g.asks.calls)
	g.asks.mu.Unlock()
	if open != maxOpenAsks {
		t.Errorf("%d questions open; want %d", open, maxOpenAsks)
	}
}
