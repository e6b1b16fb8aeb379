//go:build e2e

package security

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/app/egress"
)

// decisionLog is the shared gate's decision log (set by runMain).
var decisionLog string

// TestHostDisk: what the guest does cannot make the host write without
// bound (issue 29, item 3).
func TestHostDisk(t *testing.T) {
	t.Parallel()
	p := probe(t)

	attack(t, ctlFamily, "loop refused requests on one kept-alive proxy connection to flood the decision log", func(a *Attack) {
		const n = 3000
		req := "GET http://flood.test/ HTTP/1.1\r\nHost: flood.test\r\n\r\n"
		task, r := netTask(a, p+" raw -", strings.Repeat(req, n))
		answered := strings.Count(r.Stdout, "403 Forbidden")
		if answered < n/2 {
			a.Fatalf("the gate answered %d of %d pipelined requests on the connection: %s", answered, n, r)
		}
		// The count is written within an interval of the last refusal.
		var lines []egress.Decision
		var bytes int
		deadline := time.Now().Add(2*egress.DefaultRepeatInterval + 5*time.Second)
		for {
			lines, bytes = logLinesOf(a, task)
			if refusalsIn(lines) >= answered || time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		a.Logf("%d refusals on one connection: %d lines, %d bytes in the decision log", answered, len(lines), bytes)
		if len(lines) > 20 || bytes > 20<<10 {
			a.breach("%d refused requests on one connection wrote %d lines (%d bytes) to the decision log", answered, len(lines), bytes)
		}
		if got := refusalsIn(lines); got < answered {
			a.Errorf("the log accounts for %d of %d refusals:\n%+v", got, answered, lines)
		}
	})
}

// refusalsIn counts the refusals decision-log lines stand for.
func refusalsIn(lines []egress.Decision) int {
	n := 0
	for _, d := range lines {
		n += max(1, d.Repeated)
	}
	return n
}

// logLinesOf returns the decision-log lines of task, and their size.
func logLinesOf(t testing.TB, task string) ([]egress.Decision, int) {
	t.Helper()
	f, err := os.Open(decisionLog)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []egress.Decision
	size := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	want := fmt.Sprintf("%q", task)
	for sc.Scan() {
		if !strings.Contains(sc.Text(), want) {
			continue
		}
		var d egress.Decision
		if err := json.Unmarshal(sc.Bytes(), &d); err != nil {
			t.Fatalf("decision log line %q: %v", sc.Text(), err)
		}
		if d.Task == task {
			out = append(out, d)
			size += len(sc.Bytes()) + 1
		}
	}
	return out, size
}
