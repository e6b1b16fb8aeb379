//go:build linux

package qemu

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

const testGreeting = `{"QMP": {"version": {"qemu": {"micro": 22, "minor": 2, "major": 7}, "package": "Debian 1:7.2+dfsg-7+deb12u18+b3"}, "capabilities": ["oob"]}}`

// fakeMonitor is QEMU's end of a QMP connection, driven by a test.
type fakeMonitor struct {
	t *testing.T
	c *net.UnixConn
	r *bufio.Reader
}

// fakeCommand is a command as the fake received it.
type fakeCommand struct {
	Execute   string          `json:"execute"`
	Arguments json.RawMessage `json:"arguments"`
	ID        json.RawMessage `json:"id"`
}

// unixPair is a connected pair of unix stream sockets, closed at cleanup.
func unixPair(t *testing.T) (client, server *net.UnixConn) {
	t.Helper()
	a, b, err := socketPair()
	if err != nil {
		t.Fatal(err)
	}
	conn := func(f *os.File) *net.UnixConn {
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c.(*net.UnixConn)
	}
	return conn(a), conn(b)
}

// serveQMP runs script as QEMU's end of a connection and returns the
// client's end. The script ends before the test does.
func serveQMP(t *testing.T, script func(m *fakeMonitor)) *net.UnixConn {
	t.Helper()
	client, server := unixPair(t)
	m := &fakeMonitor{t: t, c: server, r: bufio.NewReader(server)}
	var wg sync.WaitGroup
	wg.Go(func() {
		defer server.Close()
		script(m)
	})
	t.Cleanup(func() {
		client.Close() // ends a script still reading
		wg.Wait()
	})
	return client
}

// send writes lines as QEMU does. Errors are the client having gone,
// which the client's side of the test judges.
func (m *fakeMonitor) send(lines ...string) {
	for _, l := range lines {
		if _, err := io.WriteString(m.c, l+"\r\n"); err != nil {
			return
		}
	}
}

// recv reads one command; ok is false once the client has gone.
func (m *fakeMonitor) recv() (cmd fakeCommand, ok bool) {
	line, err := m.r.ReadBytes('\n')
	if err != nil {
		return cmd, false
	}
	if err := json.Unmarshal(line, &cmd); err != nil {
		m.t.Errorf("fake monitor: command %q: %v", line, err)
		return cmd, false
	}
	return cmd, true
}

// expect reads one command and checks its name.
func (m *fakeMonitor) expect(name string) (fakeCommand, bool) {
	cmd, ok := m.recv()
	if ok && cmd.Execute != name {
		m.t.Errorf("fake monitor: got %q, want %q", cmd.Execute, name)
		return cmd, false
	}
	return cmd, ok
}

// reply answers cmd with a return value (JSON).
func (m *fakeMonitor) reply(cmd fakeCommand, ret string) {
	m.send(fmt.Sprintf(`{"return": %s, "id": %s}`, ret, cmd.ID))
}

// handshake is QEMU's side of newQMP.
func (m *fakeMonitor) handshake() bool {
	m.send(testGreeting)
	cmd, ok := m.expect("qmp_capabilities")
	if ok {
		if cmd.Arguments != nil || len(cmd.ID) == 0 {
			m.t.Errorf("fake monitor: qmp_capabilities arguments %s id %s", cmd.Arguments, cmd.ID)
		}
		m.reply(cmd, "{}")
	}
	return ok
}

// connectQMP is a client connected to script, which starts after the
// handshake.
func connectQMP(t *testing.T, script func(m *fakeMonitor)) *qmp {
	t.Helper()
	c := serveQMP(t, func(m *fakeMonitor) {
		if m.handshake() {
			script(m)
		}
	})
	q, err := newQMP(testContext(t, 5*time.Second), c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

func testContext(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestQMPHandshake(t *testing.T) {
	long := `{"QMP": {"x": "` + strings.Repeat("a", qmpMaxLine) + `"}}`
	for _, tc := range []struct {
		name   string
		script func(m *fakeMonitor)
		want   string // "" for success
		is     error
	}{
		{name: "ok", script: func(m *fakeMonitor) { m.handshake() }},
		{name: "not QMP", script: func(m *fakeMonitor) { m.send(`{"return": {}}`) }, want: "not a QMP greeting"},
		{name: "not JSON", script: func(m *fakeMonitor) { m.send("SSH-2.0-OpenSSH_9.2\x1b[2J") }, want: `not a QMP greeting: "SSH-2.0-OpenSSH_9.2\x1b[2J`},
		{name: "over-long", script: func(m *fakeMonitor) { m.send(long) }, is: errQMPLineTooLong},
		{name: "closed", script: func(m *fakeMonitor) {}, want: "qemu: qmp: greeting: QEMU closed the connection: EOF", is: io.EOF},
		{name: "silent", script: func(m *fakeMonitor) { m.r.ReadByte() }, is: context.DeadlineExceeded},
		{name: "capabilities refused", script: func(m *fakeMonitor) {
			m.send(testGreeting)
			if cmd, ok := m.expect("qmp_capabilities"); ok {
				m.send(fmt.Sprintf(`{"id": %s, "error": {"class": "CommandNotFound", "desc": "no"}}`, cmd.ID))
			}
		}, want: "qemu: qmp: qmp_capabilities: CommandNotFound: no"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := serveQMP(t, tc.script)
			q, err := newQMP(testContext(t, 200*time.Millisecond), c)
			if tc.want == "" && tc.is == nil {
				if err != nil {
					t.Fatal(err)
				}
				defer q.Close()
				if want := (qmpVersion{7, 2, 22, "Debian 1:7.2+dfsg-7+deb12u18+b3"}); q.version != want {
					t.Errorf("version %+v, want %+v", q.version, want)
				}
				return
			}
			if err == nil {
				t.Fatal("handshake succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) || (tc.is != nil && !errors.Is(err, tc.is)) {
				t.Errorf("err = %v, want %q / %v", err, tc.want, tc.is)
			}
			if _, werr := c.Write([]byte("x")); !errors.Is(werr, net.ErrClosed) {
				t.Errorf("connection left open after a failed handshake: %v", werr)
			}
		})
	}
}

func TestQMPExecute(t *testing.T) {
	type status struct {
		Status  string `json:"status"`
		Running bool   `json:"running"`
	}
	for _, tc := range []struct {
		name   string
		script func(m *fakeMonitor)
		cmd    string
		args   any
		want   string // "" for success
		is     error
		status status // decoded when want is ""
		events []string
	}{
		{
			name: "return", cmd: "query-status",
			script: func(m *fakeMonitor) {
				if cmd, ok := m.expect("query-status"); ok {
					m.reply(cmd, `{"status": "running", "singlestep": false, "running": true}`)
				}
			},
			status: status{"running", true},
		},
		{
			name: "arguments", cmd: "migrate", args: map[string]string{"uri": "fd:mig"},
			script: func(m *fakeMonitor) {
				if cmd, ok := m.expect("migrate"); ok {
					if string(cmd.Arguments) != `{"uri":"fd:mig"}` {
						m.t.Errorf("arguments %s", cmd.Arguments)
					}
					m.reply(cmd, "{}")
				}
			},
		},
		{
			name: "error reply", cmd: "nope",
			script: func(m *fakeMonitor) {
				if cmd, ok := m.expect("nope"); ok {
					m.send(fmt.Sprintf(`{"id": %s, "error": {"class": "CommandNotFound", "desc": "The command nope has not been found"}}`, cmd.ID))
				}
			},
			want: "qemu: qmp: nope: CommandNotFound: The command nope has not been found",
		},
		{
			name: "error without id", cmd: "stop",
			script: func(m *fakeMonitor) {
				if _, ok := m.expect("stop"); ok {
					m.send(`{"error": {"class": "GenericError", "desc": "JSON parse error"}}`)
				}
			},
			want: "GenericError: JSON parse error",
		},
		{
			name: "events skipped", cmd: "stop",
			script: func(m *fakeMonitor) {
				if cmd, ok := m.expect("stop"); ok {
					m.send(`{"timestamp": {"seconds": 1, "microseconds": 2}, "event": "STOP"}`,
						"",
						`{"event": "BIG", "data": {"x": "`+strings.Repeat("y", qmpKeptData)+`"}}`,
						`{"return": {"status": "paused"}, "id": 999999}`, // a reply to another command
						`{"return": {"status": "paused"}}`,               // nor this one
						`{"something": "new"}`,
						`{"timestamp": {"seconds": 1, "microseconds": 3}, "event": "GUEST_PANICKED", "data": {"action": "pause"}}`)
					m.reply(cmd, `{"status": "paused", "running": false}`)
				}
			},
			status: status{Status: "paused"},
			events: []string{"STOP", "BIG", `GUEST_PANICKED {"action": "pause"}`},
		},
		{
			name: "too many events", cmd: "stop",
			script: func(m *fakeMonitor) {
				if cmd, ok := m.expect("stop"); ok {
					for range qmpMaxSkipped + 1 {
						m.send(`{"event": "RESUME"}`)
					}
					m.reply(cmd, "{}")
				}
			},
			want: "qemu: qmp: stop: no reply among 1000 messages",
		},
		{
			name: "over-long line", cmd: "query-status",
			script: func(m *fakeMonitor) {
				if _, ok := m.expect("query-status"); ok {
					m.c.Write([]byte(`{"event": "` + strings.Repeat("x", qmpMaxLine)))
				}
			},
			is: errQMPLineTooLong,
		},
		{
			name: "not JSON", cmd: "query-status",
			script: func(m *fakeMonitor) {
				if _, ok := m.expect("query-status"); ok {
					m.send(`{"return": `)
				}
			},
			want: `not JSON from QEMU: "{\"return\": \r\n"`,
		},
		{
			name: "return of another shape", cmd: "query-status",
			script: func(m *fakeMonitor) {
				if cmd, ok := m.expect("query-status"); ok {
					m.reply(cmd, `["running"]`)
				}
			},
			want: "qemu: qmp: query-status: decode reply: json: cannot unmarshal array",
		},
		{
			name: "closed", cmd: "quit",
			script: func(m *fakeMonitor) {
				if _, ok := m.expect("quit"); ok {
					m.send(`{"event": "SHUTDOWN", "data": {"guest": false, "reason": "host-qmp-quit"}}`)
				}
			},
			want: "QEMU closed the connection (last event SHUTDOWN): EOF", is: errQMPClosed,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := connectQMP(t, tc.script)
			var got status
			err := q.execute(testContext(t, 5*time.Second), tc.cmd, tc.args, &got)
			if tc.want == "" && tc.is == nil {
				if err != nil {
					t.Fatal(err)
				}
				if got != tc.status {
					t.Errorf("result %+v, want %+v", got, tc.status)
				}
			} else if err == nil || !strings.Contains(err.Error(), tc.want) || (tc.is != nil && !errors.Is(err, tc.is)) {
				t.Fatalf("err = %v, want %q / %v", err, tc.want, tc.is)
			}
			var events []string
			for _, e := range q.recentEvents() {
				events = append(events, strings.TrimSpace(e.Event+" "+string(e.Data)))
			}
			if tc.events != nil && strings.Join(events, "|") != strings.Join(tc.events, "|") {
				t.Errorf("events %q, want %q", events, tc.events)
			}
		})
	}
}

func TestQMPErrorReply(t *testing.T) {
	q := connectQMP(t, func(m *fakeMonitor) {
		if cmd, ok := m.expect("device_del"); ok {
			m.send(fmt.Sprintf(`{"id": %s, "error": {"class": "DeviceNotFound", "desc": "Device 'x\u001b[31m' not found"}}`, cmd.ID))
		}
		if cmd, ok := m.expect("query-status"); ok { // an error reply leaves the client usable
			m.reply(cmd, `{"status": "running"}`)
		}
	})
	ctx := testContext(t, 5*time.Second)
	err := q.execute(ctx, "device_del", map[string]string{"id": "x"}, nil)
	var qe *qmpError
	if !errors.As(err, &qe) {
		t.Fatalf("err = %v (%T), want a *qmpError", err, err)
	}
	if qe.Class != "DeviceNotFound" || qe.Desc != "Device 'x\x1b[31m' not found" {
		t.Errorf("error %+v", qe)
	}
	if want := "qemu: qmp: device_del: DeviceNotFound: Device 'x?[31m' not found"; err.Error() != want {
		t.Errorf("message %q, want %q (control characters replaced)", err, want)
	}
	if err := q.execute(ctx, "query-status", nil, nil); err != nil {
		t.Fatal(err)
	}
}

func TestQMPBrokenStreamStaysBroken(t *testing.T) {
	q := connectQMP(t, func(m *fakeMonitor) {
		if _, ok := m.expect("query-status"); ok {
			m.send("{")
		}
		for {
			cmd, ok := m.recv()
			if !ok {
				return
			}
			m.reply(cmd, "{}")
		}
	})
	ctx := testContext(t, 5*time.Second)
	if err := q.execute(ctx, "query-status", nil, nil); err == nil {
		t.Fatal("half a JSON object accepted")
	}
	err := q.execute(ctx, "query-status", nil, nil)
	if err == nil || !strings.Contains(err.Error(), "unusable after an earlier error: not JSON") {
		t.Errorf("after a broken stream: %v", err)
	}
}

func TestQMPCancelUnblocks(t *testing.T) {
	for _, tc := range []struct {
		name string
		ctx  func(t *testing.T) context.Context
		is   error
	}{
		{"cancel", func(t *testing.T) context.Context {
			ctx, cancel := context.WithCancel(t.Context())
			time.AfterFunc(50*time.Millisecond, cancel)
			return ctx
		}, context.Canceled},
		{"deadline", func(t *testing.T) context.Context { return testContext(t, 50*time.Millisecond) }, context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			late := make(chan struct{})
			q := connectQMP(t, func(m *fakeMonitor) {
				hung, ok := m.expect("migrate")
				if !ok {
					return
				}
				// Half the reply, then nothing until the client gives up:
				// it keeps the half line and reads the rest later.
				m.c.Write([]byte(`{"return": {}, `))
				<-late
				cmd, ok := m.expect("query-status")
				if !ok {
					return
				}
				m.send(fmt.Sprintf(`"id": %s}`, hung.ID))
				m.reply(cmd, `{"status": "postmigrate"}`)
			})
			start := time.Now()
			err := q.execute(tc.ctx(t), "migrate", map[string]string{"uri": "fd:x"}, nil)
			if !errors.Is(err, tc.is) || !strings.HasPrefix(err.Error(), "qemu: qmp: migrate: ") {
				t.Fatalf("err = %v, want %v", err, tc.is)
			}
			if d := time.Since(start); d > 2*time.Second {
				t.Errorf("unblocked after %s", d)
			}
			close(late)
			var got struct{ Status string }
			if err := q.execute(testContext(t, 5*time.Second), "query-status", nil, &got); err != nil || got.Status != "postmigrate" {
				t.Errorf("after %s: %+v, %v", tc.name, got, err)
			}
		})
	}
}

func TestQMPDoneContext(t *testing.T) {
	sent := make(chan string, 1)
	q := connectQMP(t, func(m *fakeMonitor) {
		cmd, _ := m.recv()
		sent <- cmd.Execute
	})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := q.execute(ctx, "stop", nil, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v", err)
	}
	q.Close()
	if cmd := <-sent; cmd != "" {
		t.Errorf("%q sent with a done context", cmd)
	}
}

func TestQMPCloseUnblocks(t *testing.T) {
	q := connectQMP(t, func(m *fakeMonitor) {
		m.expect("query-migrate")
		m.r.ReadByte() // until the client has gone
	})
	time.AfterFunc(50*time.Millisecond, func() { q.Close() })
	err := q.execute(t.Context(), "query-migrate", nil, nil)
	if !errors.Is(err, net.ErrClosed) {
		t.Fatalf("err = %v", err)
	}
	if err := q.execute(t.Context(), "query-migrate", nil, nil); !errors.Is(err, net.ErrClosed) {
		t.Errorf("after Close: %v", err)
	}
}

func TestQMPOneCommandAtATime(t *testing.T) {
	const n = 20
	q := connectQMP(t, func(m *fakeMonitor) {
		for range n {
			cmd, ok := m.recv()
			if !ok {
				return
			}
			// One at a time: nothing more arrives before this reply.
			m.c.SetReadDeadline(time.Now().Add(5 * time.Millisecond))
			if _, err := m.r.Peek(1); err == nil {
				m.t.Errorf("a command arrived before the reply to %s", cmd.ID)
			}
			m.c.SetReadDeadline(time.Time{})
			m.reply(cmd, fmt.Sprintf(`{"n": %s}`, cmd.Arguments))
		}
	})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			var got struct{ N struct{ I int } }
			if err := q.execute(testContext(t, 10*time.Second), "echo", map[string]int{"i": i}, &got); err != nil || got.N.I != i {
				t.Errorf("command %d: got %d, %v", i, got.N.I, err)
			}
		})
	}
	wg.Wait()
}

func TestQMPSendFD(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	read := make(chan string, 1)
	q := connectQMP(t, func(m *fakeMonitor) {
		defer close(read)
		// The descriptor must come on the message with the command, so
		// the fake reads the socket itself, not through its buffer.
		buf, oob := make([]byte, 4096), make([]byte, unix.CmsgSpace(4*4))
		n, oobn, _, _, err := m.c.ReadMsgUnix(buf, oob)
		if err != nil {
			m.t.Errorf("fake monitor: %v", err)
			return
		}
		var cmd fakeCommand
		if err := json.Unmarshal(buf[:n], &cmd); err != nil || cmd.Execute != "getfd" || string(cmd.Arguments) != `{"fdname":"vmstate"}` {
			m.t.Errorf("fake monitor: command %q: %v", buf[:n], err)
			return
		}
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil || len(msgs) != 1 {
			m.t.Errorf("fake monitor: control messages %d: %v", len(msgs), err)
			return
		}
		fds, err := unix.ParseUnixRights(&msgs[0])
		if err != nil || len(fds) != 1 {
			m.t.Errorf("fake monitor: rights %v: %v", fds, err)
			return
		}
		f := os.NewFile(uintptr(fds[0]), "received")
		defer f.Close()
		m.reply(cmd, "{}")
		b, err := io.ReadAll(f)
		if err != nil {
			m.t.Errorf("fake monitor: read the received descriptor: %v", err)
		}
		read <- string(b)
	})
	if err := q.sendFD(testContext(t, 5*time.Second), "vmstate", r); err != nil {
		t.Fatal(err)
	}
	r.Close() // the fake holds its own copy
	if _, err := io.WriteString(w, "saved state"); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if got := <-read; got != "saved state" {
		t.Errorf("read %q through the passed descriptor", got)
	}
}

func TestQMPSendFDClosedFile(t *testing.T) {
	q := connectQMP(t, func(m *fakeMonitor) {
		if cmd, ok := m.expect("query-status"); ok { // the first command to arrive
			m.reply(cmd, "{}")
		}
	})
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	ctx := testContext(t, 5*time.Second)
	if err := q.sendFD(ctx, "x", f); err == nil || !strings.Contains(err.Error(), "closed file") {
		t.Errorf("closed file: %v", err)
	}
	if err := q.sendFD(ctx, "x", nil); err == nil {
		t.Error("nil file accepted")
	}
	if err := q.execute(ctx, "query-status", nil, nil); err != nil {
		t.Error(err)
	}
}

func TestQMPPrintable(t *testing.T) {
	for _, tc := range []struct {
		in   string
		max  int
		want string
	}{
		{"plain", 10, "plain"},
		{"a\nb\x1b[0m\x00", 10, "a?b?[0m?"},
		{"abcdef", 3, "abc..."},
		{"aé", 2, "a..."}, // not cut inside a character
		{"\xff", 10, "\uFFFD"},
	} {
		if got := printable(tc.in, tc.max); got != tc.want {
			t.Errorf("printable(%q, %d) = %q, want %q", tc.in, tc.max, got, tc.want)
		}
	}
}
