//go:build linux

package service

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/app/tasks"
	"github.com/airlock-sandbox/airlock/guest/client"
)

// screen reads an attachment until its output holds want.
func readUntil(t *testing.T, a TerminalConn, got *bytes.Buffer, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for !strings.Contains(got.String(), want) {
		p, err := a.Next(ctx)
		if err != nil {
			t.Fatalf("waiting for %q: %v; the terminal showed %q", want, err, got.String())
		}
		got.Write(p)
	}
}

func TestTerminal(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	task, err := w.service.OpenTerminal(ctx, TerminalRequest{Rows: 30, Cols: 100})
	if err != nil {
		t.Fatal(err)
	}
	if !task.Command.TTY || task.Command.Shell != TerminalShell {
		t.Fatalf("terminal task %+v", task.Command)
	}
	a, err := w.service.AttachTerminal(ctx, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	io.WriteString(a, "stty size; echo mark-$((6*7))\n")
	readUntil(t, a, &out, "mark-42")
	if !strings.Contains(out.String(), "30 100") {
		t.Fatalf("stty size did not say 30 100: %q", out.String())
	}
	if tk, _ := w.service.Task(ctx, task.ID); tk.State != tasks.Running {
		t.Fatalf("terminal task is %s, want running", tk.State)
	}

	if err := a.Resize(12, 40); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the resize and the input travel apart
	io.WriteString(a, "stty size\n")
	readUntil(t, a, &out, "12 40")

	// Ctrl-C reaches the shell's foreground job through the PTY.
	io.WriteString(a, "sleep 60; echo after-$((1+1))\n")
	time.Sleep(300 * time.Millisecond)
	io.WriteString(a, "\x03")
	io.WriteString(a, "echo alive-$((2+3))\n")
	readUntil(t, a, &out, "alive-5")
	if strings.Contains(out.String(), "after-2") {
		t.Fatalf("Ctrl-C did not stop sleep: %q", out.String())
	}

	// Detach and reattach: the shell is still there and the recent screen
	// comes back first.
	a.Close()
	if _, err := a.Next(ctx); err == nil || errors.Is(err, io.EOF) {
		t.Fatalf("a closed attachment reads %v", err)
	}
	b, err := w.service.AttachTerminal(ctx, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	var again bytes.Buffer
	readUntil(t, b, &again, "alive-5")
	io.WriteString(b, "echo back-$((3+4))\n")
	readUntil(t, b, &again, "back-7")

	// The log keeps the session too.
	if stdout, _ := w.output(task.ID); !strings.Contains(stdout, "back-7") {
		t.Fatalf("task log %q", stdout)
	}

	// The same terminal by request, as a window that cannot hold a
	// connection open uses it: the recent screen, then output by offset.
	// The shell writes its prompt after back-7, when it likes: read the
	// screen once it has been still for a moment.
	var o TerminalOutput
	for settled, prev := false, int64(-1); !settled; {
		if o, err = w.service.ReadTerminal(ctx, task.ID, -1); err != nil {
			t.Fatal(err)
		}
		settled, prev = o.Next == prev, o.Next
		if !settled {
			time.Sleep(200 * time.Millisecond)
		}
	}
	if !strings.Contains(string(o.Data), "back-7") || o.Next != o.Offset+int64(len(o.Data)) {
		t.Fatalf("read the screen: %+v", o)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	if idle, err := w.service.ReadTerminal(short, task.ID, o.Next); err != nil || len(idle.Data) != 0 || idle.Next != o.Next {
		t.Fatalf("a read with nothing new: %+v, %v", idle, err)
	}
	cancel()
	if err := w.service.ResizeTerminal(ctx, task.ID, 20, 70); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if err := w.service.TerminalInput(ctx, task.ID, []byte("stty size; echo poll-$((5+5))\n")); err != nil {
		t.Fatal(err)
	}
	var polled bytes.Buffer
	for next := o.Next; !strings.Contains(polled.String(), "poll-10"); {
		o, err := w.service.ReadTerminal(ctx, task.ID, next)
		if err != nil || o.Offset != next {
			t.Fatalf("read from %d: %+v, %v", next, o, err)
		}
		polled.Write(o.Data)
		next = o.Next
	}
	if !strings.Contains(polled.String(), "20 70") {
		t.Fatalf("after a resize by request: %q", polled.String())
	}

	if err := w.service.CloseTerminal(ctx, task.ID); err != nil {
		t.Fatal(err)
	}
	if tk, _ := w.service.Task(ctx, task.ID); tk.State != tasks.Killed {
		t.Fatalf("closed terminal is %+v", tk)
	}
	for {
		if _, err := b.Next(ctx); err != nil {
			if err != io.EOF {
				t.Fatalf("after close the attachment reads %v, want EOF", err)
			}
			break
		}
	}
	if _, err := w.service.AttachTerminal(ctx, task.ID); !errors.Is(err, ErrNotTerminal) {
		t.Fatalf("attach to a closed terminal: %v", err)
	}
}

func TestTerminalCancelAndExit(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	task, err := w.service.OpenTerminal(ctx, TerminalRequest{})
	if err != nil {
		t.Fatal(err)
	}
	w.waitRunning(task.ID)
	// `airlock cancel` ends a terminal like any task.
	if err := w.service.Cancel(ctx, task.ID); err != nil {
		t.Fatal(err)
	}
	if tk, _ := w.service.Wait(ctx, task.ID); tk.State != tasks.Killed {
		t.Fatalf("cancelled terminal %+v", tk)
	}

	// A shell that exits ends its terminal.
	task, err = w.service.OpenTerminal(ctx, TerminalRequest{Rows: 24, Cols: 80})
	if err != nil {
		t.Fatal(err)
	}
	a, err := w.service.AttachTerminal(ctx, task.ID)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(a, "exit 4\n")
	if tk, _ := w.service.Wait(ctx, task.ID); tk.State != tasks.Exited || tk.Exit.Code != 4 {
		t.Fatalf("exited terminal %+v", tk)
	}
	select {
	case <-a.(*TerminalAttachment).Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the attachment did not learn the terminal ended")
	}

	for _, bad := range []TerminalRequest{{Rows: 5000, Cols: 80}, {Rows: 10}} {
		if _, err := w.service.OpenTerminal(ctx, bad); err == nil {
			t.Fatalf("size %d×%d accepted", bad.Rows, bad.Cols)
		}
	}
}

// TestTerminalSlowReader: a connection that does not read is cut off
// rather than holding output in memory without bound; the shell goes on.
func TestTerminalSlowReader(t *testing.T) {
	term := newTerminal(client.Size{Rows: 24, Cols: 80})
	a := &TerminalAttachment{term: term, notify: make(chan struct{}, 1)}
	term.attached[a] = struct{}{}
	chunk := bytes.Repeat([]byte("x"), 64<<10)
	for range 2 * terminalBacklog / len(chunk) {
		term.Write(chunk)
	}
	if len(term.attached) != 0 {
		t.Fatal("a reader that fell behind is still attached")
	}
	if len(term.screen) > 2*TerminalScrollback {
		t.Fatalf("the screen holds %d bytes", len(term.screen))
	}
	ctx := context.Background()
	// A reader by offset that fell behind gets what is kept, and learns
	// from where.
	s := &Service{running: map[string]*runningTask{"t": {term: term}}}
	if o, err := s.ReadTerminal(ctx, "t", 0); err != nil || len(o.Data) != TerminalScrollback || o.Offset != term.total-TerminalScrollback || o.Next != term.total {
		t.Fatalf("read from 0 after %d bytes: %d bytes from %d, next %d, %v", term.total, len(o.Data), o.Offset, o.Next, err)
	}
	if p, err := a.Next(ctx); err != nil || len(p) > terminalBacklog {
		t.Fatalf("first read %d bytes, %v", len(p), err)
	}
	if _, err := a.Next(ctx); err == nil || err == io.EOF {
		t.Fatalf("a reader cut off reads %v", err)
	}
}
