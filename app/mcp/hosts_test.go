package mcp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/app/tasks"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// The cases here are what tests/mcp found with the TypeScript SDK's client,
// which desktop agents embed; each is pinned down here without a VM.

// hostile is task output a terminal would act on: an OSC 52 clipboard
// write, a colour, a C1 CSI (as UTF-8 and as a raw byte), a bidi override,
// bytes that are not UTF-8, a carriage return; tabs and newlines are kept.
const hostile = "a\x1b]52;c;ZXZpbA==\x07b\t\x1b[31mred \u009bJ \x9bJ \u202egnp.exe \xff\xfe\r\n"

const hostileEscaped = `a\x1b]52;c;ZXZpbA==\ab` + "\t" + `\x1b[31mred \u009bJ \x9bJ \u202egnp.exe \xff\xfe\r` + "\n"

// unsafeRunes lists what a terminal acts on in s, and the replacement
// character left where bytes were replaced rather than escaped.
func unsafeRunes(s string) []rune {
	var bad []rune
	for _, r := range s {
		if r < 0x20 && r != '\n' && r != '\t' || r >= 0x7f && r < 0xa0 || r == 0x202e || r == 0xfffd {
			bad = append(bad, r)
		}
	}
	return bad
}

func TestOutputEscaped(t *testing.T) {
	f := newFake(out{tasks.Stdout, hostile}, out{tasks.Stderr, "err\x1b[1A\x1b[2K\n"})
	cs := connect(t, f, Options{})
	ctx := context.Background()
	var res RunResult
	text, isErr := call(t, ctx, cs, "run_command", map[string]any{"argv": []string{"printf", "\x1b[2J\u009b"}}, &res)
	if isErr {
		t.Fatal(text)
	}
	if res.Stdout != hostileEscaped || res.Stderr != `err\x1b[1A\x1b[2K`+"\n" {
		t.Errorf("stdout %q stderr %q", res.Stdout, res.Stderr)
	}
	if bad := unsafeRunes(text); len(bad) > 0 {
		t.Errorf("text keeps %q: %q", bad, text)
	}
	if res.Command != `printf '\x1b[2J\u009b'` {
		t.Errorf("command = %q", res.Command)
	}
	var read ReadResult
	call(t, ctx, cs, "read_task_output", map[string]any{"task_id": res.TaskID, "offset": 0}, &read)
	if len(read.Output) != 2 || read.Output[0].Text != hostileEscaped {
		t.Errorf("read = %+v", read.Output)
	}
	res2, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "list_tasks", Arguments: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(res2)
	var back any
	json.Unmarshal(b, &back)
	if bad := unsafeRunes(fmt.Sprint(back)); len(bad) > 0 {
		t.Errorf("list_tasks keeps %q", bad)
	}
}

func TestOutputEscapedWhenCut(t *testing.T) {
	long := strings.Repeat("\x1b[1mbold\x1b[0m\n", 200)
	f := newFake(out{tasks.Stdout, long})
	cs := connect(t, f, Options{OutputLimit: 1024})
	var res RunResult
	call(t, context.Background(), cs, "run_command", map[string]any{"command": "x"}, &res)
	if res.StdoutOmitted == 0 || !strings.Contains(res.Stdout, "bytes left out here") {
		t.Fatalf("not cut: %+v", res)
	}
	if bad := unsafeRunes(res.Stdout); len(bad) > 0 || !strings.HasPrefix(res.Stdout, `\x1b[1mbold\x1b[0m`+"\n") {
		t.Errorf("cut output %q keeps %q", res.Stdout, bad)
	}
}

func TestSafeText(t *testing.T) {
	for in, want := range map[string]string{
		"":                       "",
		"plain\ttext\n":          "plain\ttext\n",
		"bücher 日本語\n":           "bücher 日本語\n",
		hostile:                  hostileEscaped,
		"\n\n\x00\n":             "\n\n\\x00\n",
		"cut \xe6\x97":           `cut \xe6\x97`,
		"\x1b]8;;http://x\x1b\\": `\x1b]8;;http://x\x1b\`,
	} {
		if got := safeText(in); got != want {
			t.Errorf("safeText(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestProgress(t *testing.T) {
	f := newFake()
	f.hold = true
	var mu sync.Mutex
	var got []*sdk.ProgressNotificationParams
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ct, st := sdk.NewInMemoryTransports()
	ss, err := NewServer(f, Options{ProgressEvery: 10 * time.Millisecond}).Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, &sdk.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *sdk.ProgressNotificationClientRequest) {
			mu.Lock()
			got = append(got, r.Params)
			mu.Unlock()
		},
	}).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	go func() {
		// The call below starts task0001, which stays queued for a few
		// of the server's looks, then runs.
		for {
			f.mu.Lock()
			n := len(f.runs)
			f.mu.Unlock()
			if n == 1 {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond)
		f.mu.Lock()
		ft := f.tasks["task0001"]
		ft.t.State, ft.t.Started = tasks.Running, time.Now()
		f.notify()
		f.mu.Unlock()
		for i := range 3 {
			time.Sleep(30 * time.Millisecond)
			f.appendOutput("task0001", tasks.Stdout, fmt.Sprintf("line %d\n", i))
		}
		time.Sleep(30 * time.Millisecond)
		f.finish("task0001", tasks.Exited, tasks.Exit{})
	}()
	params := &sdk.CallToolParams{Name: "run_command", Arguments: map[string]any{"command": "make"}}
	params.SetProgressToken("tok-1")
	res, err := cs.CallTool(ctx, params)
	if err != nil || res.IsError {
		t.Fatalf("%v %+v", err, res)
	}
	mu.Lock()
	n := len(got)
	notes := slices.Clone(got)
	mu.Unlock()
	if n < 3 {
		t.Fatalf("%d progress notifications, want one per change", n)
	}
	var msgs []string
	for i, p := range notes {
		msgs = append(msgs, p.Message)
		if p.ProgressToken != "tok-1" || i > 0 && p.Progress <= notes[i-1].Progress {
			t.Errorf("notification %d: %+v (progress must increase)", i, p)
		}
	}
	all := strings.Join(msgs, "\n")
	for _, want := range []string{"task task0001 queued", "task task0001 running", "bytes of output so far"} {
		if !strings.Contains(all, want) {
			t.Errorf("messages lack %q:\n%s", want, all)
		}
	}
	// None comes after the result.
	time.Sleep(50 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if len(got) != n {
		t.Errorf("%d notifications after the result", len(got)-n)
	}
}

func TestNoProgressUnasked(t *testing.T) {
	f := newFake(out{tasks.Stdout, "x\n"})
	f.hold = true
	var calls int
	var mu sync.Mutex
	ctx := context.Background()
	ct, st := sdk.NewInMemoryTransports()
	ss, err := NewServer(f, Options{ProgressEvery: time.Millisecond}).Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, &sdk.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *sdk.ProgressNotificationClientRequest) { mu.Lock(); calls++; mu.Unlock() },
	}).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	go func() {
		time.Sleep(50 * time.Millisecond)
		f.finish("task0001", tasks.Exited, tasks.Exit{})
	}()
	if _, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "run_command", Arguments: map[string]any{"command": "x"}}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls != 0 {
		t.Errorf("%d progress notifications without a progress token", calls)
	}
}

func TestLostTaskIsError(t *testing.T) {
	f := newFake(out{tasks.Stdout, "started\n"})
	f.lost = "no VM to run on: the sandbox is stopped; start it first"
	cs := connect(t, f, Options{})
	res, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "run_command", Arguments: map[string]any{"command": "x"}})
	if err != nil {
		t.Fatal(err)
	}
	text := res.Content[0].(*sdk.TextContent).Text
	if !res.IsError {
		t.Errorf("a lost task is not a tool error: %s", text)
	}
	for _, want := range []string{"lost (task task0001", "the sandbox is stopped", "started\n", "The next command starts the sandbox again", "ask the user"} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
	// The output so far is still there for the agent.
	b, _ := json.Marshal(res.StructuredContent)
	var rr RunResult
	if err := json.Unmarshal(b, &rr); err != nil || rr.Stdout != "started\n" || rr.State != "lost" {
		t.Errorf("structured %s: %v", b, err)
	}
}

var errNotRunning = errors.New("no Airlock service is running")

func TestServiceDown(t *testing.T) {
	f := newFake(out{tasks.Stdout, "x\n"})
	cs := connect(t, f, Options{Unavailable: errNotRunning})
	ctx := context.Background()
	var res RunResult
	if text, isErr := call(t, ctx, cs, "run_command", map[string]any{"command": "x"}, &res); isErr {
		t.Fatal(text)
	}
	f.mu.Lock()
	f.down = errNotRunning
	f.mu.Unlock()
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"run_command", map[string]any{"command": "x"}},
		{"start_task", map[string]any{"command": "x"}},
		{"task_status", map[string]any{"task_id": res.TaskID}},
		{"read_task_output", map[string]any{"task_id": res.TaskID}},
		{"list_tasks", map[string]any{}},
		{"sandbox_status", map[string]any{}},
	} {
		text, isErr := call(t, ctx, cs, c.tool, c.args, nil)
		want := "no Airlock service is running (connect: connection refused). Ask the user to start Airlock (open the desktop app, or run `airlock serve`), then call " + c.tool + " again"
		if !isErr || !strings.Contains(text, want) {
			t.Errorf("%s: %v %q", c.tool, isErr, text)
		}
	}
	// An error that is not the service being down keeps its own words.
	f.mu.Lock()
	f.down = nil
	f.mu.Unlock()
	text, _ := call(t, ctx, cs, "task_status", map[string]any{"task_id": "nosuch"}, nil)
	if strings.Contains(text, "Ask the user") {
		t.Errorf("task_status of an unknown id: %q", text)
	}
}

// TestCancelledGetsNoResponse speaks JSON-RPC to Serve directly: after
// notifications/cancelled for a call, the call's task is cancelled and no
// response for it is written; the next request is answered as usual.
func TestCancelledGetsNoResponse(t *testing.T) {
	f := newFake(out{tasks.Stdout, "working\n"})
	f.hold = true
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, f, inR, outW, Options{}) }()
	lines := make(chan []byte, 16)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			lines <- slices.Clone(sc.Bytes())
		}
	}()
	send := func(s string) {
		t.Helper()
		if _, err := io.WriteString(inW, s+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	next := func() map[string]any {
		t.Helper()
		select {
		case l := <-lines:
			var m map[string]any
			if err := json.Unmarshal(l, &m); err != nil {
				t.Fatalf("%s: %v", l, err)
			}
			return m
		case <-time.After(5 * time.Second):
			t.Fatal("no line written")
		}
		return nil
	}
	send(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	if m := next(); m["id"] != 1.0 {
		t.Fatalf("initialize: %v", m)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(`{"jsonrpc":"2.0","id":"call-7","method":"tools/call","params":{"name":"run_command","arguments":{"argv":["sleep","60"]}}}`)
	waitFor(t, func() bool { f.mu.Lock(); defer f.mu.Unlock(); return len(f.runs) == 1 })
	send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"call-7","reason":"user pressed stop"}}`)
	waitFor(t, func() bool { return slices.Equal(f.cancelled(), []string{"task0001"}) })
	send(`{"jsonrpc":"2.0","id":8,"method":"ping"}`)
	if m := next(); m["id"] != 8.0 {
		t.Errorf("the line after the cancellation is %v, want the answer to ping 8", m)
	}
	inW.Close()
	if err := <-served; err != nil {
		t.Errorf("Serve: %v", err)
	}
}

func TestCancelFilterBounds(t *testing.T) {
	var f cancelFilter
	var w strings.Builder
	r := f.reader(io.NopCloser(strings.NewReader(
		// A long line that mentions the method is not a cancellation; a
		// cancellation split over reads is one; a batch may carry one.
		`{"jsonrpc":"2.0","method":"x","params":{"pad":"` + strings.Repeat("a", 2*maxCancelLine) + `","m":"notifications/cancelled","requestId":1}}` + "\n" +
			`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":2}}` + "\n" +
			`[{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"b"}}]` + "\n")))
	if _, err := io.Copy(io.Discard, oneByte{r}); err != nil {
		t.Fatal(err)
	}
	wc := f.writer(nopWriteCloser{&w})
	for _, line := range []string{
		`{"jsonrpc":"2.0","id":1,"result":{}}`,
		`{"jsonrpc":"2.0","id":2,"result":{}}`,
		`{"jsonrpc":"2.0","id":2,"result":{}}`, // the id is forgotten once dropped
		`{"jsonrpc":"2.0","id":"b","error":{"code":1,"message":"x"}}`,
		`{"jsonrpc":"2.0","id":3,"method":"ping"}`,
	} {
		wc.Write([]byte(line + "\n"))
	}
	want := `{"jsonrpc":"2.0","id":1,"result":{}}` + "\n" + `{"jsonrpc":"2.0","id":2,"result":{}}` + "\n" + `{"jsonrpc":"2.0","id":3,"method":"ping"}` + "\n"
	if w.String() != want {
		t.Errorf("written:\n%s\nwant:\n%s", w.String(), want)
	}
	for i := range 2 * maxCancelled {
		f.add(mustID(t, float64(i)))
	}
	if len(f.ids) != maxCancelled || f.take(mustID(t, 0.0)) || !f.take(mustID(t, float64(2*maxCancelled-1))) {
		t.Errorf("%d ids kept", len(f.ids))
	}
}

// oneByte reads one byte at a time, as a slow pipe may deliver them.
type oneByte struct{ r io.Reader }

func (o oneByte) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	return o.r.Read(p[:1])
}

func mustID(t *testing.T, v any) jsonrpc.ID {
	t.Helper()
	id, err := jsonrpc.MakeID(v)
	if err != nil {
		t.Fatal(err)
	}
	return id
}
