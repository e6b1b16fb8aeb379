package egress

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// checkGolden compares got with testdata/NAME; UPDATE_GOLDEN=1 rewrites it.
func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if os.Getenv("UPDATE_GOLDEN") != "" {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with UPDATE_GOLDEN=1 to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (UPDATE_GOLDEN=1 to accept):\ngot:\n%s\nwant:\n%s", name, got, want)
	}
}

func TestDecisionLogFile(t *testing.T) {
	srv := httptest.NewServer(origin())
	defer srv.Close()
	port := portOf(t, srv.Listener.Addr().String())
	path := filepath.Join(t.TempDir(), "egress.jsonl")
	os.WriteFile(path, []byte(`{"seq":0,"earlier":"line kept"}`+"\n"), 0o600)
	tg := startGate(t, Config{Allow: []string{"origin.test"}, MapHosts: []string{"origin.test=127.0.0.1"}, LogFile: path})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sub := tg.Subscribe(ctx)

	var got []Decision
	for len(got) < 2 {
		if len(got) == 0 {
			rawRequest(t, tg.httpAddr, "GET http://origin.test:"+port+"/echo HTTP/1.1\r\nConnection: close\r\n\r\n")
		} else {
			rawRequest(t, tg.httpAddr, "GET http://nope.test/ HTTP/1.1\r\n\r\n")
		}
		select {
		case d := <-sub:
			got = append(got, d)
		case <-time.After(5 * time.Second):
			t.Fatalf("subscriber got %d decisions", len(got))
		}
	}
	if got[0].Seq != 1 || got[1].Seq != 2 || got[0].Reason != ReasonAllowedByRule || got[1].Reason != ReasonNoMatchingRule {
		t.Fatalf("subscribed:\n%s", dumpDecisions(got))
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		lines = append(lines, m)
	}
	if len(lines) != 3 || lines[0]["earlier"] != "line kept" {
		t.Fatalf("log file has %d lines: %v", len(lines), lines)
	}
	for _, k := range []string{"time", "protocol", "host", "port", "addr", "decision", "reason", "rule", "bytes_up", "bytes_down", "duration_ns"} {
		if _, ok := lines[1][k]; !ok {
			t.Errorf("allowed line lacks %q: %v", k, lines[1])
		}
	}
	if lines[2]["decision"] != "deny" || lines[2]["reason"] != "no-matching-rule" || lines[2]["host"] != "nope.test" {
		t.Errorf("denied line %v", lines[2])
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("log mode %v", fi.Mode())
	}
}

func TestDecisionLineGolden(t *testing.T) {
	j, err := newJournal("", 4, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := j.record(Decision{
		Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Task: "task-1", Protocol: ProtoConnect,
		Host: "example.com", Port: 443, Addr: "93.184.215.14", Action: ActionAllow, Reason: ReasonAllowedByRule,
		Rule: "*.example.com", BytesUp: 517, BytesDown: 4096, Duration: 1500 * time.Millisecond,
	})
	line, _ := json.Marshal(d)
	checkGolden(t, "decision.jsonl", string(line)+"\n")
}

func TestJournalRingAndSlowSubscriber(t *testing.T) {
	g, err := New(Config{Limits: Limits{Recent: 3}})
	if err != nil {
		t.Fatal(err)
	}
	slow := g.Subscribe(context.Background()) // never read until the end
	ctx, cancel := context.WithCancel(context.Background())
	gone := g.Subscribe(ctx)
	cancel()
	if _, ok := <-gone; ok {
		t.Fatal("cancelled subscription delivered a decision")
	}
	done := make(chan struct{})
	go func() {
		for i := 0; i < subscriberBuffer+50; i++ {
			g.record(Decision{Time: time.Now(), Protocol: ProtoSOCKS, Host: "h", Reason: ReasonNoMatchingRule})
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("a slow subscriber blocked the gate")
	}
	r := g.Recent()
	if len(r) != 3 || r[0].Seq != subscriberBuffer+48 || r[2].Seq != subscriberBuffer+50 {
		t.Fatalf("Recent:\n%s", dumpDecisions(r))
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	n := 0
	for d := range slow { // closed by Close
		n++
		if d.Seq != uint64(n) {
			t.Fatalf("decision %d has seq %d", n, d.Seq)
		}
	}
	if n != subscriberBuffer {
		t.Fatalf("slow subscriber got %d; want the first %d", n, subscriberBuffer)
	}
	if _, ok := <-g.Subscribe(context.Background()); ok {
		t.Fatal("Subscribe after Close delivered")
	}
	checkNoGateGoroutines(t)
}
