//go:build linux

package service

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/app/egress"
)

// An allow-always answer to a question covering several destinations keeps
// every one of them in the settings.
func TestAskAllowAlwaysCoversAll(t *testing.T) {
	w := newWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ui, stop := context.WithCancel(ctx)
	defer stop()
	w.service.Events(ui, true)
	d := askDecider{w.service}
	got := make(chan egress.Verdict, 2)
	for _, h := range []string{"a.test", "b.test"} {
		go func() {
			v, _ := d.Decide(ctx, egress.Request{Task: "t", Protocol: egress.ProtoConnect, Host: h, Port: 443})
			got <- v
		}()
	}
	waitAsks(t, w.service, func(as []Ask) bool { return len(as) == 1 && len(as[0].More) == 1 })
	as, _ := w.service.Asks(ctx)
	if err := w.service.Answer(ctx, as[0].ID, VerdictAllowAlways); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if v := <-got; v != egress.AllowAlways {
			t.Fatalf("verdict %v", v)
		}
	}
	st, _ := w.service.Settings(ctx)
	if !slices.Contains(st.Allow, "a.test:443") || !slices.Contains(st.Allow, "b.test:443") {
		t.Fatalf("allow list %v", st.Allow)
	}
	if as, _ := w.service.Asks(ctx); len(as) != 0 {
		t.Fatalf("still pending: %+v", as)
	}
}
