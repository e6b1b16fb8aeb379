//go:build linux

package agent

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/guest/api"
	agentv1 "github.com/airlock-sandbox/airlock/guest/api/agent/v1"
	"github.com/airlock-sandbox/airlock/guest/api/execwire"
	"github.com/airlock-sandbox/airlock/guest/client"
)

// env is an agent served on loopback TCP with a test configuration.
type env struct {
	client    *client.Client // the host's client, over loopback TCP
	agentAddr string         // ServeAgent's listener
	execAddr  string         // ServeExec's listener
	srv       *Server
	workspace string
	home      string
	cgroups   bool

	mu       sync.Mutex
	clock    []time.Time
	poweroff []bool
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: tasks switch to uid 1000")
	}
}

// accessibleDir makes a temporary directory the task user can use.
func accessibleDir(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	for p := d; p != os.TempDir() && p != "/"; p = filepath.Dir(p) {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(d, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	return d
}

// testCgroupRoot returns a fresh cgroup2 subtree for the test's tasks, or
// "" when this host has no writable cgroup2.
func testCgroupRoot(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	var mnt string
	for _, line := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if !ok || !strings.HasPrefix(post, "cgroup2 ") {
			continue
		}
		if f := strings.Fields(pre); len(f) >= 5 {
			mnt = f[4]
			break
		}
	}
	if mnt == "" {
		return ""
	}
	root := filepath.Join(mnt, "airlock-test-"+strconv.Itoa(os.Getpid())+"-"+strconv.FormatInt(time.Now().UnixNano(), 36))
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Logf("cgroup2 at %s is not writable: %v", mnt, err)
		return ""
	}
	t.Cleanup(func() {
		// Children first; every task cgroup is gone once its Exec returned,
		// but a killed process can take a moment to leave (EBUSY) on a
		// loaded machine.
		var err error
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			_ = os.Remove(filepath.Join(root, "tasks"))
			if err = os.Remove(root); err == nil || !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
				break
			}
		}
		if err != nil {
			t.Errorf("remove test cgroup: %v", err)
		}
	})
	return filepath.Join(root, "tasks")
}

func newEnv(t *testing.T, opts ...func(*Config)) *env {
	t.Helper()
	requireRoot(t)
	e := &env{workspace: accessibleDir(t), home: accessibleDir(t)}
	cg := testCgroupRoot(t)
	e.cgroups = cg != ""
	// TrustCA must never write the host's own trust store.
	ca := t.TempDir()
	cfg := Config{
		CAFile:       filepath.Join(ca, "ssl", "certs", "airlock-ca.pem"),
		CABundle:     filepath.Join(ca, "ssl", "certs", "ca-certificates.crt"),
		Transport:    "test",
		UID:          1000,
		GID:          1000,
		UserHome:     e.home,
		WorkspaceDir: e.workspace,
		CgroupRoot:   cg,
		SetClock: func(tm time.Time) error {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.clock = append(e.clock, tm)
			return nil
		},
		PowerOff: func(reboot bool) error {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.poweroff = append(e.poweroff, reboot)
			return nil
		},
	}
	for _, o := range opts {
		o(&cfg)
	}
	e.srv = New(cfg)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- e.srv.ServeAgent(l) }()
	el, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	execServed := make(chan error, 1)
	go func() { execServed <- e.srv.ServeExec(el) }()
	t.Cleanup(func() {
		l.Close()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
		el.Close()
		if err := <-execServed; err != nil {
			t.Errorf("serve exec: %v", err)
		}
		e.srv.Wait()
	})
	e.agentAddr = l.Addr().String()
	e.client, _ = client.New(func(ctx context.Context, port uint32) (net.Conn, error) {
		addr := e.agentAddr
		if port == api.PortExec {
			addr = e.execAddr
		}
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	})
	e.execAddr = el.Addr().String()
	t.Cleanup(func() { e.client.Close() }) // before the listeners' cleanup: its kept streams end first
	return e
}

// stream is the host's end of one task's stream, at the protocol level.
type stream struct {
	c    *net.TCPConn
	r    *execwire.Reader
	stop func() bool
}

// exec opens a task stream; cancelling ctx closes it (abandons the task).
func (e *env) exec(ctx context.Context) (*stream, error) {
	c, err := net.Dial("tcp", e.execAddr)
	if err != nil {
		return nil, err
	}
	return &stream{c: c.(*net.TCPConn), r: execwire.NewReader(c), stop: context.AfterFunc(ctx, func() { c.Close() })}, nil
}

func (s *stream) Send(req *agentv1.ExecRequest) error {
	b, err := execwire.AppendMessage(nil, execwire.KindRequest, req)
	if err == nil {
		_, err = s.c.Write(b)
	}
	return err
}

// event is one frame from the guest: an event, or output of a kind.
type event struct {
	*agentv1.ExecEvent
	kind execwire.Kind
	data []byte
}

// Recv returns the next frame; an Error event is returned as the error.
func (s *stream) Recv() (event, error) {
	k, n, err := s.r.Next()
	if err != nil {
		return event{}, err
	}
	if k != execwire.KindEvent {
		b, err := s.r.Payload(n)
		return event{kind: k, data: bytes.Clone(b)}, err
	}
	ev := &agentv1.ExecEvent{}
	if err := s.r.Message(n, ev); err != nil {
		return event{}, err
	}
	if e := ev.GetError(); e != nil {
		return event{}, e
	}
	return event{ExecEvent: ev, kind: k}, nil
}

func (s *stream) Close() { s.stop(); s.c.Close() }

// result is everything one Exec produced.
type result struct {
	started bool
	stdout  bytes.Buffer
	stderr  bytes.Buffer
	exit    *agentv1.Exit
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	// A failure guard only: no test should come near it.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// run starts start, sends msgs after Started, and collects events until Exit.
func (e *env) run(t *testing.T, start *agentv1.ExecStart, msgs ...*agentv1.ExecRequest) (*result, error) {
	t.Helper()
	stream, err := e.exec(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if err := stream.Send(&agentv1.ExecRequest{Msg: &agentv1.ExecRequest_Start{Start: start}}); err != nil {
		t.Fatal(err)
	}
	return collect(t, stream, msgs...)
}

func collect(t *testing.T, stream *stream, msgs ...*agentv1.ExecRequest) (*result, error) {
	t.Helper()
	r := &result{}
	for {
		ev, err := stream.Recv()
		if err != nil {
			if r.exit != nil && errors.Is(err, io.EOF) {
				return r, nil
			}
			if r.exit != nil {
				t.Fatalf("after exit: %v", err)
			}
			return r, err
		}
		if r.exit != nil {
			t.Fatalf("frame after exit: %v %s", ev.ExecEvent, ev.kind)
		}
		switch ev.kind {
		case execwire.KindStdout:
			r.stdout.Write(ev.data)
			continue
		case execwire.KindStderr:
			r.stderr.Write(ev.data)
			continue
		}
		switch ev := ev.GetEvent().(type) {
		case *agentv1.ExecEvent_Started:
			if r.started {
				t.Fatal("two started events")
			}
			r.started = true
			for _, m := range msgs {
				if err := stream.Send(m); err != nil {
					t.Fatalf("send: %v", err)
				}
			}
		case *agentv1.ExecEvent_Exit:
			r.exit = ev.Exit
		}
	}
}

func shell(s string) *agentv1.ExecStart { return &agentv1.ExecStart{Shell: s} }

func stdin(b string) *agentv1.ExecRequest {
	return &agentv1.ExecRequest{Msg: &agentv1.ExecRequest_Stdin{Stdin: []byte(b)}}
}

var closeStdin = &agentv1.ExecRequest{Msg: &agentv1.ExecRequest_CloseStdin{CloseStdin: true}}

func mustRun(t *testing.T, e *env, start *agentv1.ExecStart, msgs ...*agentv1.ExecRequest) *result {
	t.Helper()
	r, err := e.run(t, start, msgs...)
	if err != nil {
		t.Fatalf("exec %v: %v", start, err)
	}
	if !r.started || r.exit == nil {
		t.Fatalf("exec %v: started %v, exit %v", start, r.started, r.exit)
	}
	return r
}

// alive reports whether pid is a live process (a zombie waiting for a
// reaper outside the test is dead).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X'
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

func lines(b *bytes.Buffer) []string {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b.Bytes()))
	for sc.Scan() {
		out = append(out, strings.TrimRight(sc.Text(), "\r"))
	}
	return out
}

func wantCode(t *testing.T, err error, code agentv1.Code, msg string) {
	t.Helper()
	if agentv1.CodeOf(err) != code || !strings.Contains(err.Error(), msg) {
		t.Fatalf("got %v, want %v containing %q", err, code, msg)
	}
}
