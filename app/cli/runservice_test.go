package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/app/egress"
	"github.com/airlock-sandbox/airlock/app/service"
)

// Through the service the refusals of the task (and only of it) reach its
// stderr with the command that allows them there, and a question waiting
// in the window is said once, with the time left.
func TestTaskReport(t *testing.T) {
	var b bytes.Buffer
	r := newTaskReport(&b, "t1")
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	r.now = func() time.Time { return now }
	deny := func(task, host string, reason egress.Reason) service.Event {
		return service.Event{Kind: "egress", Egress: &egress.Decision{Task: task, Host: host, Port: 443, Action: egress.ActionDeny, Reason: reason}}
	}
	ask := &service.Ask{ID: "q1", Task: "t1", Host: "wait\x1b[2J.test", Port: 443, Time: now.Add(-15 * time.Second)}
	for _, e := range []service.Event{
		deny("t1", "blocked.test", egress.ReasonNoMatchingRule),
		deny("t1", "blocked.test", egress.ReasonNoMatchingRule),
		deny("other", "elsewhere.test", egress.ReasonNoMatchingRule),
		{Kind: "egress", Egress: &egress.Decision{Task: "t1", Host: "ok.test", Port: 443, Action: egress.ActionAllow}},
		{Kind: "ask", Ask: ask},
		{Kind: "ask", Ask: ask},
		{Kind: "ask", Ask: &service.Ask{ID: "q2", Task: "other", Host: "x.test", Port: 443, Time: now}},
	} {
		r.event(e)
	}
	want := "airlock: egress: refused blocked.test:443 (no-matching-rule); allow it with airlock egress allow blocked.test\n" +
		`airlock: egress: wait\x1b[2J.test:443 waits for an answer in the Airlock window (45s left)` + "\n"
	if b.String() != want {
		t.Fatalf("got:\n%s\nwant:\n%s", b.String(), want)
	}
	if strings.Contains(b.String(), "--allow") || strings.Contains(b.String(), "--map-host") {
		t.Fatalf("a run flag suggested through the service:\n%s", b.String())
	}
}
