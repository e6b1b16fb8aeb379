//go:build linux

package service

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/app/egress"
	"github.com/airlock-sandbox/airlock/app/sandbox"
	"github.com/airlock-sandbox/airlock/app/session"
	"github.com/airlock-sandbox/airlock/app/tasks"
	"github.com/airlock-sandbox/airlock/guest/agent"
	"github.com/airlock-sandbox/airlock/guest/api"
	"github.com/airlock-sandbox/airlock/vm"
	"github.com/airlock-sandbox/airlock/vm/vmtest"
)

// world is a service whose VMs are fake machines running the real guest
// agent on this host (tasks run as uid 1000 when the tests run as root).
type world struct {
	t       *testing.T
	dir     string
	home    string
	mu      sync.Mutex
	kill    chan struct{} // closing it makes the current VM die
	boots   int
	noExec  int // boots up to this one serve agent calls but no task streams
	service *Service
	// upper, when set, plays the guest's changes layer: the agent exports
	// and forgets what is in it, as the guest's overlay's upper folder.
	upper string
}

func newWorld(t *testing.T) *world {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("the agent switches to uid 1000: run as root")
	}
	// The task user (uid 1000) must reach its home: t.TempDir's parent is 0700.
	home, err := os.MkdirTemp("", "airlock-service-home-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(home, 0o777)
	t.Cleanup(func() { os.RemoveAll(home) })
	w := &world{t: t, dir: t.TempDir(), home: home, kill: make(chan struct{})}
	w.open()
	return w
}

func (w *world) open() {
	w.t.Helper()
	s, err := Open(Config{
		StateDir: filepath.Join(w.dir, "state"), SettingsPath: filepath.Join(w.dir, "settings.json"),
		Image: sandbox.Image{Kernel: "k", Initrd: "i"}, CancelGrace: 500 * time.Millisecond,
		Start: func(ctx context.Context, o sandbox.Options) (session.Sandbox, error) {
			o.NewMachine = func(cfg vm.Config) (vm.Machine, error) { return vmtest.New(cfg, w.boot), nil }
			o.GuestCA = nil // the agent runs on this host: never touch its trust store
			return sandbox.Start(ctx, o)
		},
	})
	if err != nil {
		w.t.Fatal(err)
	}
	w.service = s
	w.t.Cleanup(func() { s.Close(context.Background()) })
}

// boot plays the guest: the real agent, readiness, power-off on request.
func (w *world) boot(ctx context.Context, g *vmtest.Guest) error {
	w.mu.Lock()
	w.boots++
	kill := w.kill
	w.mu.Unlock()
	l, err := g.Listen(api.PortAgent)
	if err != nil {
		return err
	}
	off := make(chan struct{})
	var once sync.Once
	cfg := agent.Config{
		UserHome: w.home, WorkspaceDir: w.home,
		SetClock: func(time.Time) error { return nil },
		PowerOff: func(bool) error { once.Do(func() { close(off) }); return nil },
	}
	w.mu.Lock()
	upper := w.upper
	w.mu.Unlock()
	if upper != "" {
		cfg.LayerUpper, cfg.LayerLower, cfg.RefreshLayer = upper, w.home, func() error { return nil }
	}
	srv := agent.New(cfg)
	go srv.ServeAgent(l)
	defer l.Close()
	if upper != "" {
		ll, err := g.Listen(api.PortLayer)
		if err != nil {
			return err
		}
		defer ll.Close()
		go srv.ServeLayer(ll)
	}
	w.mu.Lock()
	serveExec := w.boots > w.noExec
	w.mu.Unlock()
	if serveExec {
		el, err := g.Listen(api.PortExec)
		if err != nil {
			return err
		}
		defer el.Close()
		go srv.ServeExec(el)
	}
	c, err := g.Dial(ctx, api.PortReady)
	if err != nil {
		return err
	}
	api.WriteReady(c, api.Ready{AgentVersion: "test"})
	c.Close()
	select {
	case <-off:
		return nil
	case <-ctx.Done():
		return nil
	case <-kill:
		return errors.New("the VM process was killed")
	}
}

func (w *world) run(req RunRequest) tasks.Task {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	t, err := w.service.Run(ctx, req)
	if err != nil {
		w.t.Fatal(err)
	}
	if t, err = w.service.Wait(ctx, t.ID); err != nil {
		w.t.Fatal(err)
	}
	return t
}

func (w *world) output(id string) (stdout, stderr string) {
	w.t.Helper()
	chunks, _, err := w.service.Logs(context.Background(), id, 0)
	if err != nil {
		w.t.Fatal(err)
	}
	var o, e strings.Builder
	for _, c := range chunks {
		if c.Stream == tasks.Stderr {
			e.Write(c.Data)
		} else {
			o.Write(c.Data)
		}
	}
	return o.String(), e.String()
}

func TestRunWaitLogs(t *testing.T) {
	w := newWorld(t)
	task := w.run(RunRequest{Shell: "echo out; echo err >&2; cat; id -u; exit 3", Stdin: []byte("in\n")})
	if task.State != tasks.Exited || task.Exit.Code != 3 {
		t.Fatalf("task %+v", task)
	}
	out, errOut := w.output(task.ID)
	if out != "out\nin\n1000\n" || errOut != "err\n" {
		t.Fatalf("stdout %q stderr %q", out, errOut)
	}
	if task := w.run(RunRequest{Argv: []string{"no-such-command"}}); task.State != tasks.Exited || task.Exit.Code != 127 {
		t.Fatalf("missing command: %+v", task)
	}
	// The proxy environment names the task's own credential.
	task = w.run(RunRequest{Shell: "echo $HTTP_PROXY"})
	if out, _ := w.output(task.ID); !strings.Contains(out, "@127.0.0.1:3128") {
		t.Fatalf("proxy env %q", out)
	}
}

func TestCancelAndTimeout(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	task, err := w.service.Run(ctx, RunRequest{Shell: "trap '' TERM; sleep 60"})
	if err != nil {
		t.Fatal(err)
	}
	w.waitRunning(task.ID)
	if err := w.service.Cancel(ctx, task.ID); err != nil {
		t.Fatal(err)
	}
	if task, _ = w.service.Wait(ctx, task.ID); task.State != tasks.Killed {
		t.Fatalf("cancelled task (ignoring SIGTERM) is %+v", task)
	}
	if task := w.run(RunRequest{Shell: "sleep 60", Timeout: 300 * time.Millisecond}); task.State != tasks.TimedOut {
		t.Fatalf("timed task: %+v", task)
	}
}

// TestVMDiesMidTask: the task is marked lost, the VM comes back, and the
// next task runs on the new one.
// waitRunning waits until the task has been handed to a VM.
func (w *world) waitRunning(id string) {
	w.t.Helper()
	for i := 0; ; i++ {
		if tk, _ := w.service.Task(context.Background(), id); tk.State == tasks.Running {
			return
		}
		if i > 1000 {
			w.t.Fatalf("task %s never ran", id)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// killVM makes the current VM die.
func (w *world) killVM() {
	w.mu.Lock()
	close(w.kill)
	w.kill = make(chan struct{})
	w.mu.Unlock()
}

func TestVMDiesMidTask(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	task, err := w.service.Run(ctx, RunRequest{Shell: "echo started; sleep 60"})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if out, _ := w.output(task.ID); out == "started\n" {
			break
		}
		if i > 500 {
			t.Fatal("task never started")
		}
		time.Sleep(10 * time.Millisecond)
	}
	w.killVM()
	if task, _ = w.service.Wait(ctx, task.ID); task.State != tasks.Lost {
		t.Fatalf("task on a dead VM: %+v", task)
	}
	if out, _ := w.output(task.ID); out != "started\n" {
		t.Fatalf("output received before the VM died was lost: %q", out)
	}
	if next := w.run(RunRequest{Shell: "echo again"}); next.State != tasks.Exited {
		t.Fatalf("after the VM died: %+v", next)
	}
	st, _ := w.service.Status(ctx)
	if st.Session.Generation < 2 {
		t.Fatalf("status after a restart: %+v", st.Session)
	}
}

// TestTaskStreamRefused: a VM whose agent answers its health checks but
// refuses task streams (the robust suite's stream flood does this) must not
// hold a task forever: the task waits a bounded time for a replacement VM,
// is retried on the same VM, and ends lost with the transport's reason; the
// healthy VM is not replaced for it.
func TestTaskStreamRefused(t *testing.T) {
	defer func(d time.Duration) { retryWait = d }(retryWait)
	retryWait = 300 * time.Millisecond
	w := newWorld(t)
	w.noExec = 1
	task := w.run(RunRequest{Shell: "true"})
	if task.State != tasks.Lost || !strings.Contains(task.Reason, "refused") {
		t.Fatalf("task on a VM refusing task streams: %+v", task)
	}
	w.mu.Lock()
	boots := w.boots
	w.mu.Unlock()
	if boots != 1 {
		t.Fatalf("%d boots: a VM whose agent answers was replaced", boots)
	}
}

// TestTaskWaitsForReplacement: a task that cannot reach its VM's agent runs
// on the VM the session boots to replace it.
func TestTaskWaitsForReplacement(t *testing.T) {
	w := newWorld(t)
	w.noExec = 1
	ctx := context.Background()
	task, err := w.service.Run(ctx, RunRequest{Shell: "echo second VM"})
	if err != nil {
		t.Fatal(err)
	}
	// Once the task has been tried on the first VM, kill that VM.
	w.waitRunning(task.ID)
	w.killVM()
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if task, err = w.service.Wait(wctx, task.ID); err != nil || task.State != tasks.Exited || task.Exit.Code != 0 {
		t.Fatalf("task after its VM was replaced: %+v, %v", task, err)
	}
	if out, _ := w.output(task.ID); out != "second VM\n" {
		t.Fatalf("output %q", out)
	}
	if w.mu.Lock(); w.boots != 2 {
		t.Fatalf("%d boots, want 2", w.boots)
	}
	w.mu.Unlock()
}

// TestHistorySurvivesRestart: a new service on the same state folder finds
// the earlier tasks and their output.
func TestHistorySurvivesRestart(t *testing.T) {
	w := newWorld(t)
	task := w.run(RunRequest{Shell: "echo kept"})
	w.service.Close(context.Background())
	w.open()
	got, err := w.service.Task(context.Background(), task.ID)
	if err != nil || got.State != tasks.Exited {
		t.Fatalf("after restart: %+v %v", got, err)
	}
	if out, _ := w.output(task.ID); out != "kept\n" {
		t.Fatalf("output after restart %q", out)
	}
}

func TestEgressRulesAndWorkspace(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	if _, err := w.service.EgressRule(ctx, "allow", "*.com"); err == nil {
		t.Fatal("allow *.com accepted")
	}
	if _, err := w.service.EgressRule(ctx, "allow", "pypi.org"); err != nil {
		t.Fatal(err)
	}
	if _, err := w.service.EgressRule(ctx, "deny", "ads.test"); err != nil {
		t.Fatal(err)
	}
	st, err := w.service.EgressRule(ctx, "remove", "ads.test")
	if err != nil || len(st.Allow) != 1 || len(st.Deny) != 0 {
		t.Fatalf("rules %+v %v", st, err)
	}
	if err := w.service.SetWorkspace(ctx, "/", false, ""); err == nil {
		t.Fatal("sharing / was accepted")
	}
	b, err := os.ReadFile(filepath.Join(w.dir, "settings.json"))
	if err != nil || !strings.Contains(string(b), "pypi.org") || strings.Contains(string(b), `"workspace": "/"`) {
		t.Fatalf("settings file %s %v", b, err)
	}
}

func TestEvents(t *testing.T) {
	w := newWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ch, err := w.service.Events(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	task := w.run(RunRequest{Shell: "echo hello"})
	var sawSession, sawOutput, sawExit bool
	for e := range ch {
		switch {
		case e.Kind == "session" && e.Session != nil:
			sawSession = true
		case e.Kind == "task" && e.Task.Task.ID == task.ID && e.Task.Kind == tasks.EventOutput:
			sawOutput = true
		case e.Kind == "task" && e.Task.Task.ID == task.ID && e.Task.Task.State == tasks.Exited:
			sawExit = true
		}
		if sawSession && sawOutput && sawExit {
			return
		}
	}
	t.Fatalf("events: session %v output %v exit %v", sawSession, sawOutput, sawExit)
}

// TestAsk: with a UI attached, an unmatched connection is asked about; the
// answer decides, and allow-always is kept in the settings. Without a UI
// the gate denies at once.
func TestAsk(t *testing.T) {
	w := newWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d := askDecider{w.service}
	req := egress.Request{Task: "t", Protocol: egress.ProtoHTTP, Host: "new.test", Port: 80}
	if v, _ := d.Decide(ctx, req); v != egress.Deny {
		t.Fatalf("no UI attached: %v", v)
	}
	ui, stop := context.WithCancel(ctx)
	defer stop()
	events, _ := w.service.Events(ui, true)
	got := make(chan egress.Verdict, 1)
	go func() { v, _ := d.Decide(ctx, req); got <- v }()
	var ask *Ask
	for e := range events {
		if e.Kind == "ask" {
			ask = e.Ask
			break
		}
	}
	if as, _ := w.service.Asks(ctx); len(as) != 1 || as[0].Host != "new.test" {
		t.Fatalf("pending asks %+v", as)
	}
	if err := w.service.Answer(ctx, ask.ID, "maybe"); err == nil {
		t.Fatal("a bad verdict was accepted")
	}
	if err := w.service.Answer(ctx, ask.ID, VerdictAllowAlways); err != nil {
		t.Fatal(err)
	}
	if v := <-got; v != egress.AllowAlways {
		t.Fatalf("verdict %v", v)
	}
	if st, _ := w.service.Settings(ctx); len(st.Allow) != 1 || st.Allow[0] != "new.test:80" {
		t.Fatalf("allow-always not kept: %+v", st.Allow)
	}
	if err := w.service.Answer(ctx, ask.ID, VerdictDeny); !errors.Is(err, ErrNoSuchAsk) {
		t.Fatalf("second answer: %v", err)
	}
}

// TestStatusCacheDir: the status names the cache folder (templates, the
// console log), so "where things are" can show it.
func TestStatusCacheDir(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	w := newWorld(t)
	st, err := w.service.Status(context.Background())
	if err != nil || st.CacheDir != filepath.Join(cache, "airlock") {
		t.Fatalf("Status().CacheDir = %q, %v; want %s", st.CacheDir, err, filepath.Join(cache, "airlock"))
	}
}
