//go:build !windows

package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/app/api"
	"github.com/airlock-sandbox/airlock/app/egress"
	"github.com/airlock-sandbox/airlock/app/service"
	"github.com/airlock-sandbox/airlock/app/tasks"
)

// hostile are names a guest can ask the gate for (SOCKS carries any bytes
// as a name), each aimed at the terminal that shows them.
var hostile = []string{
	"clip\x1b]52;c;cm0gLXJmIH4=\x07.test",          // OSC 52: write the clipboard
	"x.test\r\nairlock: egress: allowed evil.test", // a forged Airlock line
	"up\x1b[1A\x1b[2K.test",                        // move up, erase the line
	"c1\u009b2J.test",                              // C1 CSI
	"moc.\u202eevil.test",                          // bidi override
	"bad\xff\xfe.test",                             // not UTF-8
}

// rawControl reports the first character in s a terminal would act on.
func rawControl(s string) (rune, bool) {
	for _, r := range s {
		if r == '\n' {
			continue // the line ends the CLI writes itself
		}
		if r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0 || r == '\u202e' {
			return r, true
		}
	}
	return 0, false
}

func TestReportDenialsEscapes(t *testing.T) {
	var b bytes.Buffer
	r := denialReport{w: &b, seen: map[string]bool{}}
	for _, h := range hostile {
		r.add(egress.Decision{Action: egress.ActionDeny, Host: h, Port: 443, Reason: egress.ReasonBadRequest})
	}
	if c, ok := rawControl(b.String()); ok {
		t.Fatalf("raw %U reaches the terminal:\n%q", c, b.String())
	}
	if got := strings.Count(b.String(), "\n"); got != len(hostile) {
		t.Fatalf("%d lines for %d names (a name broke a line):\n%s", got, len(hostile), b.String())
	}
	if !strings.Contains(b.String(), `refused clip\x1b]52;c;cm0gLXJmIH4=\a.test:443`) {
		t.Fatalf("the name is not shown escaped:\n%s", b.String())
	}
	if strings.Contains(b.String(), "--allow") {
		t.Fatalf("a malformed name is offered as a rule:\n%s", b.String())
	}
}

// TestReportDenialsBounded: a flood of distinct names is named up to a
// bound, then told once; the set of names stops growing.
func TestReportDenialsBounded(t *testing.T) {
	var b bytes.Buffer
	r := denialReport{w: &b, seen: map[string]bool{}}
	for i := range 50_000 {
		r.add(egress.Decision{Action: egress.ActionDeny, Host: fmt.Sprintf("h%d.flood.test", i), Port: 443, Reason: egress.ReasonNoMatchingRule})
	}
	if len(r.seen) > maxReported {
		t.Fatalf("%d names kept, bound %d", len(r.seen), maxReported)
	}
	if got := strings.Count(b.String(), "\n"); got != maxReported+1 {
		t.Fatalf("%d lines, want %d", got, maxReported+1)
	}
	if !strings.Contains(b.String(), "not naming more") {
		t.Fatalf("the bound is not said:\n%s", b.String()[len(b.String())-200:])
	}
	// A name seen before is still not repeated.
	b.Reset()
	r.add(egress.Decision{Action: egress.ActionDeny, Host: "h1.flood.test", Port: 443})
	if b.Len() != 0 {
		t.Fatalf("repeated: %s", b.String())
	}
}

// outputCore is a service with hostile names in its egress log and task
// list.
type outputCore struct {
	service.Core
}

func (outputCore) Status(context.Context) (service.Status, error) { return service.Status{}, nil }

func (outputCore) EgressLog(context.Context) ([]egress.Decision, error) {
	var ds []egress.Decision
	for i, h := range hostile {
		ds = append(ds, egress.Decision{Seq: uint64(i + 1), Time: time.Unix(0, 0), Protocol: egress.ProtoSOCKS, Host: h, Port: 443,
			Action: egress.ActionDeny, Reason: egress.ReasonBadRequest, Detail: "target " + h + ": invalid"})
	}
	return ds, nil
}

func (outputCore) Tasks(context.Context) ([]tasks.Task, error) {
	var ts []tasks.Task
	for i, h := range hostile {
		ts = append(ts, tasks.Task{ID: fmt.Sprintf("t%d", i), State: tasks.Exited, Command: tasks.Command{Shell: "curl " + h}})
	}
	return ts, nil
}

// TestGuestStringsEscapedInListings: `airlock egress log` (text and
// JSON) and `airlock tasks` print no raw control characters.
func TestGuestStringsEscapedInListings(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "a.sock")
	l, err := api.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go api.Serve(ctx, l, api.Handler(outputCore{}, nil), nil)
	for _, args := range [][]string{
		{"egress", "log"},
		{"egress", "log", "--denied"},
		{"egress", "log", "--json"},
		{"tasks"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			code := Main(append(args, "--socket", sock), Stdio{In: strings.NewReader(""), Out: &out, Err: &errb})
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errb.String())
			}
			if c, ok := rawControl(out.String()); ok {
				t.Fatalf("raw %U reaches the terminal:\n%q", c, out.String())
			}
			if !strings.Contains(out.String(), "moc.") {
				t.Fatalf("the hostile names are missing:\n%s", out.String())
			}
		})
	}
}

// TestStatusLastErrorEscaped: the session's last error can quote the
// guest (a boot message, an agent's answer).
func TestStatusLastErrorEscaped(t *testing.T) {
	var b strings.Builder
	st := service.Status{}
	st.Session.LastError = "agent said: \x1b]52;c;eA==\x07\r\nairlock: fine"
	writeStatus(&b, st)
	if c, ok := rawControl(b.String()); ok {
		t.Fatalf("raw %U reaches the terminal:\n%q", c, b.String())
	}
}

// TestReportDenialsPinnedPort: a pinned name refused on a port no rule
// allows is offered that port, not the address or another pin.
func TestReportDenialsPinnedPort(t *testing.T) {
	var b bytes.Buffer
	r := denialReport{w: &b, seen: map[string]bool{}}
	r.add(egress.Decision{Action: egress.ActionDeny, Host: "files.test", Port: 5432, Addr: "127.0.0.1",
		Reason: egress.ReasonPrivateAddress, Rule: "map-host files.test=127.0.0.1"})
	r.add(egress.Decision{Action: egress.ActionDeny, Host: "rebind.test", Port: 80, Addr: "127.0.0.1", Reason: egress.ReasonPrivateAddress})
	want := "refused files.test:5432 (private-address); allow it with --allow files.test:5432\n" +
		"airlock: egress: refused rebind.test:80 (private-address); allow it with --allow 127.0.0.1 or --map-host rebind.test=127.0.0.1\n"
	if !strings.HasSuffix(b.String(), want) {
		t.Fatalf("got:\n%s", b.String())
	}
}

// A task ended by `airlock cancel` (or by the service, with its reason)
// says so on stderr and exits 128+signal, as README documents.
func TestTaskExitCancelled(t *testing.T) {
	for _, tc := range []struct {
		task tasks.Task
		code int
		want string
	}{
		{tasks.Task{ID: "t1", State: tasks.Killed, Reason: "cancelled", Exit: tasks.Exit{Signal: 15}}, 143, "airlock: task t1 was cancelled (airlock cancel)\n"},
		{tasks.Task{ID: "t2", State: tasks.Killed, Reason: "cancelled"}, 137, "airlock: task t2 was cancelled (airlock cancel)\n"},
		{tasks.Task{ID: "t3", State: tasks.Killed, Reason: "the workspace is over its quota\x1b[2J", Exit: tasks.Exit{Signal: 9}}, 137,
			"airlock: task t3 was ended: the workspace is over its quota\\x1b[2J\n"},
	} {
		var errb bytes.Buffer
		err := taskExit(Stdio{Err: &errb}, tc.task, 0)
		var ee exitError
		if !errors.As(err, &ee) || ee.code != tc.code {
			t.Errorf("%s: %v, want exit %d", tc.task.ID, err, tc.code)
		}
		if errb.String() != tc.want {
			t.Errorf("%s: stderr %q, want %q", tc.task.ID, errb.String(), tc.want)
		}
	}
}
