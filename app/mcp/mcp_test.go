package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/app/changes"
	"github.com/airlock-sandbox/airlock/app/egress"
	"github.com/airlock-sandbox/airlock/app/service"
	"github.com/airlock-sandbox/airlock/app/session"
	"github.com/airlock-sandbox/airlock/app/settings"
	"github.com/airlock-sandbox/airlock/app/tasks"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// connect serves core over an in-memory transport and returns the SDK's
// own client, connected to it.
func connect(t *testing.T, core service.Core, opts Options) *sdk.ClientSession {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ct, st := sdk.NewInMemoryTransports()
	ss, err := NewServer(core, opts).Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cs.Close()
		ss.Wait()
		cancel()
	})
	return cs
}

// call calls a tool and decodes its structured result into out (when not
// nil). It returns the text content and whether the result is an error.
func call(t *testing.T, ctx context.Context, cs *sdk.ClientSession, name string, args map[string]any, out any) (string, bool) {
	t.Helper()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: protocol error: %v", name, err)
	}
	var text strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			text.WriteString(tc.Text)
		}
	}
	if !res.IsError && out != nil {
		b, err := json.Marshal(res.StructuredContent)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: decode %s: %v", name, b, err)
		}
	}
	return text.String(), res.IsError
}

func TestToolList(t *testing.T) {
	f := newFake()
	cs := connect(t, f, Options{})
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		if tool.Description == "" || tool.InputSchema == nil || tool.OutputSchema == nil {
			t.Errorf("%s: description, input or output schema missing", tool.Name)
		}
		// Nothing that could widen the sandbox.
		for _, word := range []string{"allow", "deny", "rule", "workspace", "setting", "start_vm", "stop", "restart",
			"apply", "discard", "undo", "checkpoint", "approve", "accept", "revert", "reject"} {
			if strings.Contains(tool.Name, word) {
				t.Errorf("tool %s looks like it changes the sandbox (%q)", tool.Name, word)
			}
		}
	}
	slices.Sort(names)
	want := []string{"cancel_task", "egress_log", "list_changes", "list_tasks", "read_task_output", "run_command", "sandbox_status", "start_task", "task_status"}
	if !slices.Equal(names, want) {
		t.Errorf("tools = %v, want %v", names, want)
	}
}

func TestRunCommand(t *testing.T) {
	f := newFake(out{tasks.Stdout, "hello\n"}, out{tasks.Stderr, "warning: x\n"}, out{tasks.Stdout, "world\n"})
	cs := connect(t, f, Options{})
	var res RunResult
	text, isErr := call(t, context.Background(), cs, "run_command", map[string]any{
		"command": "make test", "env": map[string]any{"B": "2", "A": "1"}, "cwd": "sub/dir", "stdin": "input", "root": true,
	}, &res)
	if isErr {
		t.Fatalf("error: %s", text)
	}
	if res.ExitCode == nil || *res.ExitCode != 3 || res.State != "exited" || !res.Finished {
		t.Errorf("result = %+v, want exited with code 3", res.TaskInfo)
	}
	if res.Stdout != "hello\nworld\n" || res.Stderr != "warning: x\n" || res.StdoutOmitted != 0 || res.Note != "" {
		t.Errorf("stdout %q stderr %q omitted %d note %q", res.Stdout, res.Stderr, res.StdoutOmitted, res.Note)
	}
	for _, want := range []string{"exit code 3", "--- stdout ---\nhello\nworld\n", "--- stderr ---\nwarning: x\n"} {
		if !strings.Contains(text, want) {
			t.Errorf("text %q lacks %q", text, want)
		}
	}
	got := f.runs[0]
	want := service.RunRequest{Shell: "make test", Env: []string{"A=1", "B=2"}, Cwd: "/workspace/sub/dir", Root: true, Timeout: DefaultTimeout, Stdin: []byte("input")}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("request = %+v, want %+v", got, want)
	}
}

func TestRunCommandTruncates(t *testing.T) {
	var lines []out
	for i := range 200 {
		lines = append(lines, out{tasks.Stdout, fmt.Sprintf("line %04d ---------------------------------------------------\n", i)})
	}
	lines = append(lines, out{tasks.Stderr, "short\n"})
	f := newFake(lines...)
	cs := connect(t, f, Options{OutputLimit: 4096})
	ctx := context.Background()
	var res RunResult
	text, isErr := call(t, ctx, cs, "run_command", map[string]any{"argv": []string{"seq", "200"}}, &res)
	if isErr {
		t.Fatalf("error: %s", text)
	}
	total := int64(200 * len(lines[0].text))
	if res.StdoutOmitted == 0 || res.StdoutOmitted+int64(strings.Count(res.Stdout, "line ")*len(lines[0].text)) < total-int64(len(lines[0].text)) {
		t.Errorf("omitted %d of %d", res.StdoutOmitted, total)
	}
	if !strings.HasPrefix(res.Stdout, "line 0000") || !strings.HasSuffix(res.Stdout, "line 0199 ---------------------------------------------------\n") {
		t.Errorf("stdout does not keep head and tail:\n%s", res.Stdout)
	}
	if res.Stderr != "short\n" || res.StderrOmitted != 0 {
		t.Errorf("stderr %q omitted %d", res.Stderr, res.StderrOmitted)
	}
	if len(res.Stdout) > 4096+200 {
		t.Errorf("stdout is %d bytes for a 4096 byte limit", len(res.Stdout))
	}
	if !strings.Contains(res.Stdout, "bytes left out here") || !strings.Contains(text, "Output was cut") || !strings.Contains(res.Note, res.TaskID) {
		t.Errorf("no marker or note pointing to the log:\n%s", text)
	}
	// The note's offset leads to the first line left out.
	var off int64
	if _, err := fmt.Sscanf(res.Note[strings.Index(res.Note, `"offset": `):], `"offset": %d`, &off); err != nil {
		t.Fatalf("no offset in note %q: %v", res.Note, err)
	}
	head := res.Stdout[:strings.Index(res.Stdout, "[…")]
	firstOut := strings.Count(head, "\n") // the index of the first line not wholly shown
	var rd ReadResult
	call(t, ctx, cs, "read_task_output", map[string]any{"task_id": res.TaskID, "offset": off}, &rd)
	if len(rd.Output) == 0 || !strings.Contains(rd.Output[0].Text, fmt.Sprintf("line %04d", firstOut)) {
		t.Errorf("reading from offset %d gives %+v, want line %d", off, rd.Output, firstOut)
	}
	if res.NextOffset != f.tasks[res.TaskID].t.Output.LogBytes {
		t.Errorf("next_offset %d, want the end %d", res.NextOffset, f.tasks[res.TaskID].t.Output.LogBytes)
	}
}

func TestClipUTF8(t *testing.T) {
	c := newClip(16)
	s := strings.Repeat("é", 40) // 80 bytes of two-byte characters
	c.add(tasks.Chunk{Stream: tasks.Stdout, Data: []byte(s[:33])})
	c.add(tasks.Chunk{Offset: 41, Stream: tasks.Stdout, Data: []byte(s[33:])})
	text, omitted, _ := c.text("x")
	if strings.ContainsRune(text, '\uFFFD') || !strings.HasPrefix(text, "éé\n") || !strings.HasSuffix(text, "\néééééé") {
		t.Errorf("text = %q", text)
	}
	if omitted != 80-4-12 {
		t.Errorf("omitted = %d", omitted)
	}
}

func TestStartAndReadOutput(t *testing.T) {
	f := newFake(out{tasks.Stdout, "one\n"}, out{tasks.Stderr, "two\n"}, out{tasks.Stderr, "three\n"})
	cs := connect(t, f, Options{})
	ctx := context.Background()
	var st StartResult
	if text, isErr := call(t, ctx, cs, "start_task", map[string]any{"argv": []string{"sleep", "1000"}}, &st); isErr {
		t.Fatal(text)
	}
	if st.TaskID == "" || st.State != "queued" || !strings.Contains(st.Note, "read_task_output") {
		t.Errorf("start = %+v", st)
	}
	if f.runs[0].Timeout != DefaultMaxTimeout {
		t.Errorf("start_task timeout %v, want %v", f.runs[0].Timeout, DefaultMaxTimeout)
	}
	// A small max_bytes returns one record, then the rest.
	var r1, r2, r3 ReadResult
	call(t, ctx, cs, "read_task_output", map[string]any{"task_id": st.TaskID, "offset": 0, "max_bytes": 1}, &r1)
	if len(r1.Output) != 1 || r1.Output[0] != (OutputPart{"stdout", 0, "one\n"}) || !r1.More || r1.Finished {
		t.Errorf("first read = %+v", r1)
	}
	call(t, ctx, cs, "read_task_output", map[string]any{"task_id": st.TaskID, "offset": r1.NextOffset}, &r2)
	if len(r2.Output) != 1 || r2.Output[0].Text != "two\nthree\n" || r2.Output[0].Stream != "stderr" || r2.More || r2.Finished {
		t.Errorf("second read = %+v", r2)
	}
	if !strings.Contains(r2.Note, "still queued") {
		t.Errorf("note = %q", r2.Note)
	}
	// Output arriving while a reader waits is returned to it.
	go func() {
		time.Sleep(50 * time.Millisecond)
		f.appendOutput(st.TaskID, tasks.Stdout, "four\n")
		f.finish(st.TaskID, tasks.Exited, tasks.Exit{Code: 3})
	}()
	call(t, ctx, cs, "read_task_output", map[string]any{"task_id": st.TaskID, "offset": r2.NextOffset, "wait_seconds": 10}, &r3)
	if len(r3.Output) != 1 || r3.Output[0].Text != "four\n" {
		t.Errorf("waited read = %+v", r3)
	}
	var r4 ReadResult
	call(t, ctx, cs, "read_task_output", map[string]any{"task_id": st.TaskID, "offset": r3.NextOffset, "wait_seconds": 10}, &r4)
	if len(r4.Output) != 0 || !r4.Finished || r4.ExitCode == nil || *r4.ExitCode != 3 || r4.NextOffset != r3.NextOffset {
		t.Errorf("final read = %+v", r4)
	}
	// Status, listing and a cancel that comes too late.
	var info TaskInfo
	call(t, ctx, cs, "task_status", map[string]any{"task_id": st.TaskID}, &info)
	if info.State != "exited" || info.Command != "sleep 1000" || info.StdoutBytes != 9 || info.StderrBytes != 10 {
		t.Errorf("status = %+v", info)
	}
	if text, isErr := call(t, ctx, cs, "cancel_task", map[string]any{"task_id": st.TaskID}, nil); !isErr || !strings.Contains(text, "already ended") {
		t.Errorf("cancel of an ended task: %v %q", isErr, text)
	}
	var list ListResult
	call(t, ctx, cs, "start_task", map[string]any{"command": "true"}, nil)
	call(t, ctx, cs, "list_tasks", map[string]any{}, &list)
	if len(list.Tasks) != 2 || list.Tasks[0].TaskID == st.TaskID || list.Tasks[1].TaskID != st.TaskID {
		t.Errorf("list = %+v, want newest first", list)
	}
	call(t, ctx, cs, "list_tasks", map[string]any{"active_only": true}, &list)
	if len(list.Tasks) != 1 || list.Tasks[0].State != "queued" {
		t.Errorf("active list = %+v", list)
	}
	var c CancelResult
	if text, isErr := call(t, ctx, cs, "cancel_task", map[string]any{"task_id": list.Tasks[0].TaskID}, &c); isErr || c.State != "killed" {
		t.Errorf("cancel: %q %+v", text, c)
	}
}

func TestCancelWithRequest(t *testing.T) {
	f := newFake(out{tasks.Stdout, "working\n"})
	f.hold = true
	cs := connect(t, f, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "run_command", Arguments: map[string]any{"argv": []string{"sleep", "60"}}})
		done <- err
	}()
	waitFor(t, func() bool { f.mu.Lock(); defer f.mu.Unlock(); return len(f.runs) == 1 })
	cancel()
	if err := <-done; err == nil {
		t.Error("the cancelled call returned no error")
	}
	waitFor(t, func() bool { return slices.Equal(f.cancelled(), []string{"task0001"}) })
	// The server goes on serving.
	var st StartResult
	if text, isErr := call(t, context.Background(), cs, "start_task", map[string]any{"argv": []string{"true"}}, &st); isErr {
		t.Error(text)
	}
}

func TestRunCommandStillRunning(t *testing.T) {
	f := newFake(out{tasks.Stdout, "partial\n"})
	f.hold = true
	cs := connect(t, f, Options{WaitMargin: time.Millisecond})
	var res RunResult
	text, isErr := call(t, context.Background(), cs, "run_command", map[string]any{"argv": []string{"sleep", "60"}, "timeout_seconds": 1}, &res)
	if isErr || res.Finished || res.Stdout != "partial\n" || !strings.Contains(res.Note, "still queued") {
		t.Errorf("%v %q %+v", isErr, text, res)
	}
	if len(f.cancelled()) != 0 {
		t.Error("a task still running after the wait was cancelled")
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting")
		}
	}
}

func TestBoundedInputs(t *testing.T) {
	f := newFake()
	cs := connect(t, f, Options{MaxStdin: 1024})
	ctx := context.Background()
	id := "task0001"
	call(t, ctx, cs, "start_task", map[string]any{"argv": []string{"true"}}, nil)
	many := make([]string, maxArgs+1)
	for i := range many {
		many[i] = "x"
	}
	bigEnv := map[string]any{}
	for i := range maxEnv + 1 {
		bigEnv[fmt.Sprintf("V%d", i)] = "1"
	}
	for _, tc := range []struct {
		name, tool string
		args       map[string]any
		want       string
	}{
		{"nothing", "run_command", map[string]any{}, "nothing to run"},
		{"both", "run_command", map[string]any{"argv": []string{"ls"}, "command": "ls"}, "not both"},
		{"empty argv0", "start_task", map[string]any{"argv": []string{""}}, "argv[0] is empty"},
		{"argv count", "run_command", map[string]any{"argv": many}, "at most 4096"},
		{"argv size", "run_command", map[string]any{"argv": []string{"echo", strings.Repeat("a", maxArgvBytes)}}, "put long data in a file"},
		{"command size", "start_task", map[string]any{"command": strings.Repeat("a", maxShellBytes+1)}, "in a file under /workspace"},
		{"nul", "run_command", map[string]any{"argv": []string{"a\x00b"}}, "NUL"},
		{"env name", "run_command", map[string]any{"command": "env", "env": map[string]any{"1X": "y"}}, "not a valid variable name"},
		{"env count", "run_command", map[string]any{"command": "env", "env": bigEnv}, "at most 256"},
		{"stdin", "run_command", map[string]any{"command": "cat", "stdin": strings.Repeat("a", 1025)}, "at most 1024"},
		{"timeout", "run_command", map[string]any{"command": "true", "timeout_seconds": 3601}, "use start_task"},
		{"start timeout", "start_task", map[string]any{"command": "true", "timeout_seconds": 4*3600 + 1}, "over the limit of 14400"},
		{"negative timeout", "run_command", map[string]any{"command": "true", "timeout_seconds": -1}, "negative"},
		{"cwd", "run_command", map[string]any{"command": "true", "cwd": strings.Repeat("a", maxCwdBytes+1)}, "cwd must be"},
		{"wrong type", "run_command", map[string]any{"argv": "ls -la"}, "validating"},
		{"negative offset", "read_task_output", map[string]any{"task_id": id, "offset": -1}, "negative"},
		{"bad offset", "read_task_output", map[string]any{"task_id": id, "offset": 3}, "pass 0 or a next_offset"},
		{"max bytes", "read_task_output", map[string]any{"task_id": id, "max_bytes": 2 << 20}, "max_bytes must be"},
		{"wait", "read_task_output", map[string]any{"task_id": id, "wait_seconds": 61}, "wait_seconds must be"},
		{"no id", "task_status", map[string]any{"task_id": ""}, "task_id is empty"},
		{"long id", "cancel_task", map[string]any{"task_id": strings.Repeat("a", 65)}, "8 characters"},
		{"unknown id", "task_status", map[string]any{"task_id": "zzzzzzzz"}, "list_tasks shows"},
		{"list limit", "list_tasks", map[string]any{"limit": 101}, "limit must be"},
		{"egress limit", "egress_log", map[string]any{"limit": 501}, "limit must be"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text, isErr := call(t, ctx, cs, tc.tool, tc.args, nil)
			if !isErr || !strings.Contains(text, tc.want) {
				t.Errorf("isError %v, text %q; want an error with %q", isErr, text, tc.want)
			}
		})
	}
	if len(f.runs) != 1 {
		t.Errorf("%d tasks ran, want only the first", len(f.runs))
	}
	if len(f.forbidden) != 0 {
		t.Errorf("tools called %v", f.forbidden)
	}
}

func TestSandboxStatusAndEgressLog(t *testing.T) {
	f := newFake()
	f.status = service.Status{
		Session:  session.Status{State: session.StateRunning, Uptime: 90 * time.Second},
		Settings: settings.Settings{Workspace: "/home/u/project", CPUs: 2, MemoryMiB: 1024, Allow: []string{"*.pypi.org"}},
	}
	now := time.Now()
	f.decisions = []egress.Decision{
		{Seq: 1, Time: now, Task: "task0001", Protocol: egress.ProtoConnect, Host: "files.pythonhosted.org", Port: 443, Action: egress.ActionDeny, Reason: egress.ReasonNoMatchingRule},
		{Seq: 2, Time: now, Task: "task0001", Protocol: egress.ProtoConnect, Host: "pypi.org", Port: 443, Action: egress.ActionAllow, Reason: egress.ReasonAllowedByRule, Rule: "*.pypi.org"},
		{Seq: 3, Time: now, Task: "task0002", Protocol: egress.ProtoConnect, Host: "169.254.169.254", Port: 80, Action: egress.ActionDeny, Reason: egress.ReasonMetadataAddress},
		{Seq: 4, Time: now, Task: "task0002", Protocol: egress.ProtoSOCKS, Host: "github.com", Port: 22, Action: egress.ActionDeny, Reason: egress.ReasonNoMatchingRule},
	}
	cs := connect(t, f, Options{})
	ctx := context.Background()
	var st SandboxStatus
	call(t, ctx, cs, "sandbox_status", nil, &st)
	if st.VMState != "running" || st.WorkspaceGuestPath != "/workspace" || st.WorkspaceHostPath != "/home/u/project" ||
		!slices.Equal(st.EgressAllow, []string{"*.pypi.org"}) || st.EgressDeny == nil || st.UptimeSeconds != 90 {
		t.Errorf("status = %+v", st)
	}
	var eg EgressResult
	call(t, ctx, cs, "egress_log", map[string]any{"denied_only": true}, &eg)
	if eg.Matching != 3 || len(eg.Decisions) != 3 || eg.Decisions[2].Host != "github.com" ||
		!slices.Equal(eg.Refused, []string{"files.pythonhosted.org:443", "github.com:22"}) || !strings.Contains(eg.Note, "airlock egress allow") {
		t.Errorf("denied = %+v", eg)
	}
	call(t, ctx, cs, "egress_log", map[string]any{"limit": 1, "task_id": "task0001"}, &eg)
	if eg.Matching != 2 || len(eg.Decisions) != 1 || eg.Decisions[0].Host != "pypi.org" || eg.Decisions[0].Decision != "allow" {
		t.Errorf("newest of task0001 = %+v", eg)
	}
	call(t, ctx, cs, "egress_log", map[string]any{"host": "PYTHONHOSTED"}, &eg)
	if len(eg.Decisions) != 1 || eg.Decisions[0].Reason != "no-matching-rule" {
		t.Errorf("host filter = %+v", eg)
	}
	if len(f.forbidden) != 0 {
		t.Errorf("tools called %v", f.forbidden)
	}
}

// TestEgressLogEscapesGuestNames: a name the guest asked the gate for
// reaches the MCP client (and the terminal it may print on) escaped, in
// the decisions, the refused list and the note.
func TestEgressLogEscapesGuestNames(t *testing.T) {
	f := newFake()
	const name = "x\x1b]52;c;cm0gLXJmIH4=\x07\u009b2J\u202e.test\r\nairlock: allowed"
	f.decisions = []egress.Decision{
		{Seq: 1, Time: time.Now(), Protocol: egress.ProtoSOCKS, Host: name, Port: 443, Action: egress.ActionDeny,
			Reason: egress.ReasonNoMatchingRule, Detail: "target " + name},
	}
	cs := connect(t, f, Options{})
	var eg EgressResult
	text, isErr := call(t, context.Background(), cs, "egress_log", nil, &eg)
	if isErr || len(eg.Decisions) != 1 {
		t.Fatalf("egress_log: %s %+v", text, eg)
	}
	b, _ := json.Marshal(eg)
	for _, s := range []string{text, string(b), eg.Decisions[0].Host, eg.Decisions[0].Detail, eg.Note, strings.Join(eg.Refused, " ")} {
		for _, r := range s {
			if r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0 || r == '\u202e' {
				t.Fatalf("raw %U in %q", r, s)
			}
		}
	}
	if want := `x\x1b]52;c;cm0gLXJmIH4=\a\u009b2J\u202e.test\r\nairlock: allowed`; eg.Decisions[0].Host != want {
		t.Fatalf("host = %q, want %q", eg.Decisions[0].Host, want)
	}
}

// TestServe runs the stdio entry point over pipes.
func TestServe(t *testing.T) {
	f := newFake(out{tasks.Stdout, "ok\n"})
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, f, inR, outW, Options{Version: "test"}) }()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "test", Version: "1"}, nil).
		Connect(ctx, &sdk.IOTransport{Reader: outR, Writer: inW}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := cs.InitializeResult().ServerInfo; got.Name != "airlock" || got.Version != "test" {
		t.Errorf("server info = %+v", got)
	}
	var res RunResult
	if text, isErr := call(t, ctx, cs, "run_command", map[string]any{"argv": []string{"echo", "ok"}}, &res); isErr || res.Stdout != "ok\n" {
		t.Errorf("%q %+v", text, res)
	}
	cs.Close()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("Serve did not return after the client closed")
	}
	cancel()
}

func TestClipCutsAtLines(t *testing.T) {
	c := newClip(64) // 16 bytes of head, 48 of tail; 103 bytes in all
	c.add(tasks.Chunk{Offset: 0, Stream: tasks.Stdout, Data: []byte("aaaaaaaaa\nbbbbbb")})
	c.add(tasks.Chunk{Offset: 24, Stream: tasks.Stdout, Data: []byte("bbbb\n" + strings.Repeat("c", 40) + "\n")})
	c.add(tasks.Chunk{Offset: 77, Stream: tasks.Stdout, Data: []byte(strings.Repeat("d", 30) + "\n" + strings.Repeat("e", 9) + "\n")})
	text, omitted, from := c.text("x")
	want := "aaaaaaaaa\n[… 52 bytes left out here; read_task_output {\"task_id\": \"x\", \"offset\": 0} returns them …]\n" +
		strings.Repeat("d", 30) + "\n" + strings.Repeat("e", 9) + "\n"
	if text != want || omitted != 52 || from != 0 {
		t.Errorf("text = %q, omitted %d, from %d", text, omitted, from)
	}
}

// TestListChanges: list_changes reports the pending changes with escaped
// paths and never calls what would apply, discard or undo them.
func TestListChanges(t *testing.T) {
	f := newFake()
	f.pending = []changes.Entry{
		{Path: "report.md", Kind: changes.Modified, Type: changes.File, Size: 120, Text: true, LinesAdded: 3, LinesRemoved: 1},
		{Path: "evil\x1b]0;pwned\x07.txt", Kind: changes.Added, Type: changes.File, Size: 5},
		{Path: "old.csv", Kind: changes.Deleted},
	}
	cs := connect(t, f, Options{})
	var res ChangesResult
	_, isErr := call(t, context.Background(), cs, "list_changes", map[string]any{}, &res)
	if isErr {
		t.Fatal("list_changes failed")
	}
	if res.Mode != "review" || res.Pending != 3 || len(res.Changes) != 3 {
		t.Fatalf("got %+v", res)
	}
	if c := res.Changes[0]; c.Path != "report.md" || c.Kind != "modified" || c.Size != 120 || c.LinesAdded != 3 || c.LinesRemoved != 1 {
		t.Errorf("first = %+v", c)
	}
	if strings.ContainsAny(res.Changes[1].Path, "\x1b\x07") {
		t.Errorf("guest path not escaped: %q", res.Changes[1].Path)
	}
	var limited ChangesResult
	call(t, context.Background(), cs, "list_changes", map[string]any{"limit": 1}, &limited)
	if len(limited.Changes) != 1 || limited.Pending != 3 || !strings.Contains(limited.Note, "first 1 of 3") {
		t.Errorf("limit 1: %+v", limited)
	}
	if _, isErr := call(t, context.Background(), cs, "list_changes", map[string]any{"limit": 5000}, nil); !isErr {
		t.Error("limit 5000 accepted")
	}
	if len(f.forbidden) > 0 {
		t.Errorf("tools called %v", f.forbidden)
	}
}
