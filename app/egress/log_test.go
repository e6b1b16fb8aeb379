package egress

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
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
	j, err := newJournal("", 0, 4, 0, nil)
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
			g.record(Decision{Time: time.Now(), Protocol: ProtoSOCKS, Host: fmt.Sprintf("h%d.test", i), Reason: ReasonNoMatchingRule})
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

// readLogLines returns the decisions in a JSON-lines decision log.
func readLogLines(t *testing.T, path string) []Decision {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []Decision
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var d Decision
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		out = append(out, d)
	}
	return out
}

// A guest looping refused requests over one kept-alive connection costs a
// few lines and a count, not a line per request.
func TestRepeatedRefusalsAreCounted(t *testing.T) {
	const n = 2000
	path := filepath.Join(t.TempDir(), "egress.jsonl")
	g, err := New(Config{LogFile: path, Resolver: fakeResolver{}, Limits: Limits{RepeatInterval: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go g.ServeHTTPProxy(hl)
	c, err := net.Dial("tcp", hl.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for i := range n {
		if _, err := io.WriteString(c, "GET http://nope.test/ HTTP/1.1\r\nHost: nope.test\r\n\r\n"); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || resp.Close {
			t.Fatalf("response %d: %s, close %v", i, resp.Status, resp.Close)
		}
	}
	if r := g.Recent(); len(r) != repeatBurst {
		t.Errorf("Recent has %d decisions before the summary; want %d", len(r), repeatBurst)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	lines := readLogLines(t, path)
	if len(lines) != repeatBurst+1 {
		t.Fatalf("%d refusals wrote %d lines; want %d:\n%s", n, len(lines), repeatBurst+1, dumpDecisions(lines))
	}
	last := lines[len(lines)-1]
	if last.Repeated != n-repeatBurst || last.Host != "nope.test" || last.Reason != ReasonNoMatchingRule || last.Seq != repeatBurst+1 {
		t.Errorf("summary line %+v; want repeated %d", last, n-repeatBurst)
	}
	if r := g.Recent(); len(r) != repeatBurst+1 || r[repeatBurst].Repeated != n-repeatBurst {
		t.Errorf("Recent:\n%s", dumpDecisions(r))
	}
}

// The count is written once per interval while the refusals go on (the
// interval's timer is called directly here), and a kind refused no more is
// forgotten, so its next refusal is a full line again.
func TestRepeatSummaryEveryInterval(t *testing.T) {
	j, err := newJournal("", 0, 100, time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer j.close()
	refuse := func(host string) {
		j.record(Decision{Time: time.Now(), Protocol: ProtoSOCKS, Host: host, Port: 443, Action: ActionDeny, Reason: ReasonNoMatchingRule})
	}
	for range 10 {
		refuse("a.test")
	}
	refuse("b.test")
	j.flushRepeats()
	r := j.recent()
	if len(r) != repeatBurst+2 || r[repeatBurst+1].Host != "a.test" || r[repeatBurst+1].Repeated != 10-repeatBurst {
		t.Fatalf("after the first interval:\n%s", dumpDecisions(r))
	}
	for range 3 {
		refuse("a.test") // still counted: the flood went on in the last interval
	}
	j.flushRepeats()
	if r = j.recent(); len(r) != repeatBurst+3 || r[len(r)-1].Repeated != 3 {
		t.Fatalf("after the second interval:\n%s", dumpDecisions(r))
	}
	j.flushRepeats() // a quiet interval: a.test is forgotten
	refuse("a.test")
	if r = j.recent(); len(r) != repeatBurst+4 || r[len(r)-1].Repeated != 0 || r[len(r)-1].Host != "a.test" {
		t.Fatalf("after a quiet interval:\n%s", dumpDecisions(r))
	}
	if j.tick == nil {
		t.Error("no timer while a kind is kept")
	}
}

// The timer writes the summary without further refusals or a close.
func TestRepeatSummaryTimer(t *testing.T) {
	j, err := newJournal("", 0, 100, 10*time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer j.close()
	for range repeatBurst + 1 {
		j.record(Decision{Time: time.Now(), Protocol: ProtoHTTP, Host: "a.test", Port: 80, Action: ActionDeny, Reason: ReasonNoMatchingRule})
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if r := j.recent(); len(r) == repeatBurst+1 && r[repeatBurst].Repeated == 1 {
			return
		}
	}
	t.Fatalf("no summary from the timer:\n%s", dumpDecisions(j.recent()))
}

// The decision log is rotated before it passes its bound, keeping LogKeep
// old files, so it never takes more than (LogKeep+1) times the bound.
func TestDecisionLogRotates(t *testing.T) {
	const max = 4 << 10
	dir := t.TempDir()
	path := filepath.Join(dir, "egress.jsonl")
	j, err := newJournal(path, max, 10, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		j.record(Decision{Time: time.Now(), Protocol: ProtoSOCKS, Host: fmt.Sprintf("h%d.test", i), Port: 443,
			Action: ActionDeny, Reason: ReasonNoMatchingRule})
	}
	if err := j.close(); err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, name := range []string{"egress.jsonl", "egress.jsonl.1", "egress.jsonl.2"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() > max || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %d bytes, mode %v; want at most %d, 0600", name, fi.Size(), fi.Mode(), max)
		}
		total += fi.Size()
	}
	if _, err := os.Stat(path + ".3"); err == nil {
		t.Error("more than LogKeep rotated files kept")
	}
	lines := readLogLines(t, path)
	if len(lines) == 0 || lines[len(lines)-1].Seq != 1000 {
		t.Fatalf("the newest file does not end with the last decision: %d lines", len(lines))
	}
	old := readLogLines(t, path+".1")
	if len(old) == 0 || old[len(old)-1].Seq+1 != lines[0].Seq {
		t.Errorf("FILE.1 does not end just before FILE starts")
	}
}

// When the log cannot be rotated, lines past its bound are dropped: the
// bound holds whatever happens to the folder.
func TestDecisionLogBoundWhenRotationFails(t *testing.T) {
	const max = 2 << 10
	dir := t.TempDir()
	path := filepath.Join(dir, "egress.jsonl")
	os.WriteFile(path+".1", []byte("old\n"), 0o600)
	os.MkdirAll(filepath.Join(path+".2", "in-the-way"), 0o700) // FILE.1 cannot become FILE.2
	j, err := newJournal(path, max, 10, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		j.record(Decision{Time: time.Now(), Protocol: ProtoSOCKS, Host: fmt.Sprintf("h%d.test", i), Action: ActionDeny, Reason: ReasonNoMatchingRule})
	}
	j.close()
	if fi, err := os.Stat(path); err != nil || fi.Size() > max || fi.Size() == 0 {
		t.Fatalf("log: %v, %v; want 1 to %d bytes", fi, err, max)
	}
}

// A journal that opens an existing log (a restarted service) has its last
// decisions as recent, across rotated files, and numbers on after them; a
// line cut short by a crash and foreign lines are skipped.
func TestJournalReadsHistoryBack(t *testing.T) {
	const max = 4 << 10
	dir := t.TempDir()
	path := filepath.Join(dir, "egress.jsonl")
	j, err := newJournal(path, max, 10, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100 {
		j.record(Decision{Time: time.Now(), Protocol: ProtoSOCKS, Host: fmt.Sprintf("h%d.test", i), Port: 443,
			Action: ActionAllow, Reason: ReasonAllowedByRule})
	}
	if err := j.close(); err != nil {
		t.Fatal(err)
	}
	if n := len(readLogLines(t, path)); n >= 40 {
		t.Fatalf("the newest file holds %d decisions; the test wants fewer than 40", n)
	}
	// The newest file ends with a foreign line and a cut one.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("not json\n{\"seq\":101,\"time\":\"2026-")
	f.Close()

	// More than the newest file holds: the rest comes from FILE.1.
	j, err = newJournal(path, max, 40, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer j.close()
	got := j.recent()
	if len(got) != 40 || got[0].Seq != 61 || got[39].Seq != 100 || got[39].Host != "h99.test" {
		t.Fatalf("recent after reopening: %d decisions (%+v); want 40, seq 61..100", len(got), got)
	}
	for i := 1; i < len(got); i++ {
		if got[i].Seq != got[i-1].Seq+1 {
			t.Fatalf("recent is not in order: %d then %d", got[i-1].Seq, got[i].Seq)
		}
	}
	if d := j.record(Decision{Time: time.Now(), Protocol: ProtoSOCKS, Host: "next.test", Action: ActionAllow, Reason: ReasonAllowedByRule}); d.Seq != 101 {
		t.Errorf("the first decision after reopening has seq %d, want 101", d.Seq)
	}
}

// Reading back is bounded by what is asked for and copes with lines longer
// than a block, and a missing log is an empty history.
func TestLoadTailLongLinesAndMissing(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "egress.jsonl")
	if ds, err := loadTail(path, 10); err != nil || len(ds) != 0 {
		t.Fatalf("missing log: %v, %v", ds, err)
	}
	var b []byte
	for i := 1; i <= 5; i++ {
		line, _ := json.Marshal(Decision{Seq: uint64(i), Detail: strings.Repeat("x", 40<<10)})
		b = append(append(b, line...), '\n')
	}
	b = append(b, strings.Repeat("y", 200<<10)...) // over-long, unterminated
	b = append(b, '\n')
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	ds, err := loadTail(path, 3)
	if err != nil || len(ds) != 3 || ds[0].Seq != 3 || ds[2].Seq != 5 {
		t.Fatalf("got %d decisions (%v), want seq 3..5", len(ds), err)
	}
}
