package desktop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/app/api"
	"github.com/airlock-sandbox/airlock/app/session"
)

// The test binary is also the fake helper: with AIRLOCK_FAKE_HELPER set it
// behaves as `airlock --socket S serve` would (or fails, or hangs) and
// records its starts and stops in AIRLOCK_FAKE_HELPER_LOG. A mode of
// "@FILE" reads the mode from FILE at each start.
func TestMain(m *testing.M) {
	if mode := os.Getenv("AIRLOCK_FAKE_HELPER"); mode != "" {
		os.Exit(fakeHelper(mode, os.Args[1:]))
	}
	os.Exit(m.Run())
}

func fakeHelper(mode string, args []string) int {
	if f, ok := strings.CutPrefix(mode, "@"); ok {
		b, err := os.ReadFile(f)
		if err != nil {
			fmt.Fprintln(os.Stderr, "airlock:", err)
			return 2
		}
		mode = strings.TrimSpace(string(b))
	}
	record := func(what string) {
		if p := os.Getenv("AIRLOCK_FAKE_HELPER_LOG"); p != "" {
			f, err := os.OpenFile(p, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
			if err == nil {
				fmt.Fprintln(f, what)
				f.Close()
			}
		}
	}
	record("start " + strings.Join(args, " "))
	if len(args) < 3 || args[0] != "--socket" || args[2] != "serve" {
		fmt.Fprintln(os.Stderr, "airlock: unexpected arguments", args)
		return 2
	}
	sock := args[1]
	switch mode {
	case "fail":
		fmt.Fprintln(os.Stderr, "airlock: serving on", sock)
		fmt.Fprintln(os.Stderr, "airlock: no minimal guest image found; build it with `make image`")
		return 1
	case "silent":
		signal.Ignore(syscall.SIGTERM)
		time.Sleep(time.Minute)
		return 0
	}
	// signal.Notify would undo an Ignore of the same signal, so a helper
	// that ignores SIGTERM listens for none.
	ctx, stop := context.WithCancel(context.Background())
	if mode == "ignoreterm" {
		signal.Ignore(syscall.SIGTERM)
	} else {
		ctx, stop = signal.NotifyContext(context.Background(), syscall.SIGTERM)
	}
	defer stop()
	l, err := api.Listen(sock)
	if err != nil {
		fmt.Fprintln(os.Stderr, "airlock:", err)
		return 1
	}
	fmt.Fprintln(os.Stderr, "airlock: serving on", sock)
	if err := api.Serve(ctx, l, api.Handler(newFakeCore(session.StateRunning, "/home/u/reports"), nil), nil); err != nil {
		return 1
	}
	record("stopped")
	return 0
}

// fakeHelperEnv is a test's fake helper: its supervisor, socket and log.
type fakeHelperEnv struct {
	sock, log string
	sup       *supervisor
}

func newFakeHelper(t *testing.T, mode string) *fakeHelperEnv {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("the helper runs on macOS; this fake needs unix signals")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	e := &fakeHelperEnv{sock: filepath.Join(dir, "run", "airlock.sock"), log: filepath.Join(dir, "helper.log")}
	client := api.NewClient(e.sock)
	e.sup = newSupervisor(exe, helperArgs(e.sock, os.Getpid(), true, false), client.Ping, nil)
	e.sup.env = append(os.Environ(), "AIRLOCK_FAKE_HELPER="+mode, "AIRLOCK_FAKE_HELPER_LOG="+e.log)
	e.sup.t = helperTimeouts{Ready: 10 * time.Second, Poll: 20 * time.Millisecond, Grace: 5 * time.Second}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.sup.Close(ctx)
	})
	return e
}

// lines are what the fake helpers recorded.
func (e *fakeHelperEnv) lines() []string {
	b, _ := os.ReadFile(e.log)
	return strings.Fields(strings.ReplaceAll(string(b), " ", "_"))
}

func (e *fakeHelperEnv) waitState(t *testing.T, want HelperState) HelperStatus {
	t.Helper()
	var st HelperStatus
	waitFor(t, "helper "+string(want), func() bool { st = e.sup.Status(); return st.State == want })
	return st
}

func TestRunsHelper(t *testing.T) {
	for goos, want := range map[string]bool{"darwin": true, "linux": false, "windows": false, "freebsd": false} {
		if got := RunsHelper(goos); got != want {
			t.Errorf("RunsHelper(%s) = %v", goos, got)
		}
	}
}

func TestHelperCandidates(t *testing.T) {
	for _, tc := range []struct {
		name, exe, goos string
		want            []string
	}{
		{"bundle", "/Applications/Airlock.app/Contents/MacOS/Airlock", "darwin",
			[]string{"/Applications/Airlock.app/Contents/Helpers/airlock", "/Applications/Airlock.app/Contents/MacOS/airlock"}},
		{"bundle, other case", "/Applications/airlock.APP/contents/macos/Airlock", "darwin",
			[]string{"/Applications/airlock.APP/contents/Helpers/airlock", "/Applications/airlock.APP/contents/macos/airlock"}},
		{"not a bundle", "/Users/u/src/airlock/bin/airlock-desktop", "darwin",
			[]string{"/Users/u/src/airlock/bin/airlock"}},
		{"a folder called Contents/MacOS outside a .app", "/x/Contents/MacOS/Airlock", "darwin",
			[]string{"/x/Contents/MacOS/airlock"}},
		{"linux", "/opt/airlock/airlock-desktop", "linux", []string{"/opt/airlock/airlock"}},
		{"windows", `/c/Program Files/Airlock/Airlock.exe`, "windows", []string{"/c/Program Files/Airlock/airlock.exe"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exe := filepath.FromSlash(tc.exe)
			var want []string
			for _, w := range tc.want {
				want = append(want, filepath.FromSlash(w))
			}
			if got := helperCandidates(exe, tc.goos); !slices.Equal(got, want) {
				t.Errorf("helperCandidates = %q, want %q", got, want)
			}
		})
	}
}

func TestFindHelper(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("file modes")
	}
	write := func(t *testing.T, p string, mode os.FileMode) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("bundle", func(t *testing.T) {
		app := filepath.Join(t.TempDir(), "Airlock.app")
		exe := filepath.Join(app, "Contents", "MacOS", "Airlock")
		write(t, exe, 0o755)
		helper := filepath.Join(app, "Contents", "Helpers", "airlock")
		write(t, helper, 0o755)
		// Reached through a symlink, as from /Applications by an alias.
		link := filepath.Join(t.TempDir(), "Airlock")
		if err := os.Symlink(exe, link); err != nil {
			t.Fatal(err)
		}
		if got, err := FindHelper(link, "darwin"); err != nil || got != helper {
			t.Fatalf("FindHelper = %q, %v; want %q", got, err, helper)
		}
	})
	t.Run("the app itself on a case-insensitive disk", func(t *testing.T) {
		// Contents/MacOS/airlock is Contents/MacOS/Airlock on such a disk:
		// a hard link is what that looks like here.
		app := filepath.Join(t.TempDir(), "Airlock.app")
		exe := filepath.Join(app, "Contents", "MacOS", "Airlock")
		write(t, exe, 0o755)
		if err := os.Link(exe, filepath.Join(app, "Contents", "MacOS", "airlock")); err != nil {
			t.Fatal(err)
		}
		_, err := FindHelper(exe, "darwin")
		if err == nil || !strings.Contains(err.Error(), "Contents/Helpers/airlock") || !strings.Contains(err.Error(), "reinstall") {
			t.Fatalf("FindHelper = %v; want the helper missing, naming where it was looked for", err)
		}
	})
	t.Run("next to the app, not executable", func(t *testing.T) {
		bin := t.TempDir()
		exe := filepath.Join(bin, "airlock-desktop")
		write(t, exe, 0o755)
		write(t, filepath.Join(bin, "airlock"), 0o644)
		if _, err := FindHelper(exe, "darwin"); err == nil {
			t.Fatal("a file that is not executable was taken")
		}
		os.Chmod(filepath.Join(bin, "airlock"), 0o755)
		if got, err := FindHelper(exe, "darwin"); err != nil || got != filepath.Join(bin, "airlock") {
			t.Fatalf("FindHelper = %q, %v", got, err)
		}
	})
}

func TestHelperArgs(t *testing.T) {
	for _, tc := range []struct {
		noBoot, verbose bool
		want            []string
	}{
		{false, false, []string{"--socket", "/s", "serve", "--parent-pid", "42"}},
		{true, false, []string{"--socket", "/s", "serve", "--parent-pid", "42", "--no-boot"}},
		{true, true, []string{"--socket", "/s", "serve", "--parent-pid", "42", "--no-boot", "-v"}},
	} {
		if got := helperArgs("/s", 42, tc.noBoot, tc.verbose); !slices.Equal(got, tc.want) {
			t.Errorf("helperArgs(%v, %v) = %q, want %q", tc.noBoot, tc.verbose, got, tc.want)
		}
	}
}

func TestHelperBackoff(t *testing.T) {
	for failures, want := range map[int]time.Duration{
		-1: 0, 0: 0, 1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 5: 16 * time.Second,
		6: 30 * time.Second, 7: 30 * time.Second, 1000: 30 * time.Second,
	} {
		if got := helperBackoff(failures); got != want {
			t.Errorf("helperBackoff(%d) = %s, want %s", failures, got, want)
		}
	}
}

func TestHelperDecisions(t *testing.T) {
	if nextStep(true) != stepAttach || nextStep(false) != stepStart {
		t.Error("nextStep: attach when a service answers, start one otherwise")
	}
	// What Quit stops: TestSupervisorStartsAndStops (the helper the app
	// started), TestSupervisorAttaches (not a service it found running).
}

func TestExitReason(t *testing.T) {
	for _, tc := range []struct {
		err  error
		last string
		want string
	}{
		{errors.New("exit status 1"), "airlock: no minimal guest image found", "the Airlock helper exited (exit status 1): no minimal guest image found"},
		{errors.New("signal: killed"), "", "the Airlock helper exited (signal: killed)"},
		{nil, "", "the Airlock helper exited"},
	} {
		if got := exitReason(tc.err, tc.last).Error(); got != tc.want {
			t.Errorf("exitReason = %q, want %q", got, tc.want)
		}
	}
	w := newTailWriter(slog.New(slog.DiscardHandler))
	fmt.Fprintf(w, "first\n%s\n\n", strings.Repeat("x", 5000))
	if got := w.last(); len(got) != maxHelperLine {
		t.Errorf("a long line kept %d bytes, want %d", len(got), maxHelperLine)
	}
	fmt.Fprint(w, "airlock: unfinished")
	if got := w.last(); got != "airlock: unfinished" {
		t.Errorf("last = %q", got)
	}
}

func TestHelperView(t *testing.T) {
	now := time.Now()
	failed := HelperStatus{State: HelperFailed, Owned: true, Err: exitReason(errors.New("exit status 1"), "airlock: no minimal guest image found\nmore"), Retry: now.Add(4 * time.Second)}
	if v, ok := helperView(failed); !ok || v.Status != "Airlock: service failed" || v.Workspace != "no minimal guest image found" || !v.CanToggle || v.Toggle != "Start the service again" {
		t.Errorf("failed: %+v, %v", v, ok)
	}
	other := HelperStatus{State: HelperFailed, Owned: true, Err: errors.New("the Airlock helper did not answer within 30s; it was stopped")}
	if v, _ := helperView(other); v.Workspace != "the Airlock helper did not answer within 30s; it was stopped" {
		t.Errorf("failed without output: %+v", v)
	}
	if v, ok := helperView(HelperStatus{State: HelperStarting}); !ok || v.Status != "Airlock: starting" || v.CanToggle {
		t.Errorf("starting: %+v, %v", v, ok)
	}
	if _, ok := helperView(HelperStatus{State: HelperRunning}); ok {
		t.Error("running: the service's own status is not shown")
	}
	if got := helperMessage(failed, now); !strings.Contains(got, "no minimal guest image found") || !strings.Contains(got, "trying again in 4s") {
		t.Errorf("helperMessage = %q", got)
	}
	if got := helperMessage(HelperStatus{State: HelperStarting}, now); got != "the Airlock service is starting" {
		t.Errorf("helperMessage = %q", got)
	}
}

// TestSupervisorStartsAndStops: no service answers, so the supervisor
// starts the helper, which then answers; Close stops it with SIGTERM.
func TestSupervisorStartsAndStops(t *testing.T) {
	e := newFakeHelper(t, "serve")
	e.sup.Start()
	st := e.waitState(t, HelperRunning)
	if !st.Owned {
		t.Fatal("a helper the app started is not owned")
	}
	if _, err := api.NewClient(e.sock).Status(context.Background()); err != nil {
		t.Fatalf("status through the helper: %v", err)
	}
	if err := e.sup.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := e.lines(); len(got) != 2 || !strings.HasPrefix(got[0], "start_--socket") || !strings.HasSuffix(got[0], "serve_--parent-pid_"+strconv.Itoa(os.Getpid())+"_--no-boot") || got[1] != "stopped" {
		t.Fatalf("helper log = %q, want one start and a stop in order", got)
	}
	if e.sup.Status().State != HelperStopped {
		t.Errorf("state after Close = %s", e.sup.Status().State)
	}
}

// TestSupervisorAttaches: a service already answers (airlock serve in a
// terminal): the helper is not started, and Close leaves the service be.
func TestSupervisorAttaches(t *testing.T) {
	e := newFakeHelper(t, "serve")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l, err := api.Listen(e.sock)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = api.Serve(ctx, l, api.Handler(newFakeCore(session.StateStopped, ""), nil), nil)
	}()
	e.sup.Start()
	if st := e.waitState(t, HelperRunning); st.Owned {
		t.Fatal("a service the app found running is owned")
	}
	if err := e.sup.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := e.lines(); len(got) != 0 {
		t.Fatalf("the helper ran: %q", got)
	}
	if _, err := api.NewClient(e.sock).Status(ctx); err != nil {
		t.Fatalf("the running service was stopped: %v", err)
	}
	cancel()
	<-served
}

// TestSupervisorTakesOver: the service the app used goes away; the
// supervisor then starts its own helper.
func TestSupervisorTakesOver(t *testing.T) {
	e := newFakeHelper(t, "serve")
	ctx, cancel := context.WithCancel(context.Background())
	l, err := api.Listen(e.sock)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = api.Serve(ctx, l, api.Handler(newFakeCore(session.StateStopped, ""), nil), nil) }()
	e.sup.Start()
	e.waitState(t, HelperRunning)
	cancel() // the user stopped their airlock serve
	waitFor(t, "the supervisor to start its own helper", func() bool { st := e.sup.Status(); return st.State == HelperRunning && st.Owned })
	if err := e.sup.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := e.lines(); len(got) != 2 || got[1] != "stopped" {
		t.Fatalf("helper log = %q", got)
	}
}

// TestSupervisorFailsAndRetries: a helper that exits at once is failed
// with its last words and a retry time, and Retry starts it again now.
func TestSupervisorFailsAndRetries(t *testing.T) {
	e := newFakeHelper(t, "fail")
	e.sup.Start()
	st := e.waitState(t, HelperFailed)
	if st.Err == nil || st.Err.Error() != "the Airlock helper exited (exit status 1): no minimal guest image found; build it with `make image`" {
		t.Fatalf("failure = %v", st.Err)
	}
	if d := time.Until(st.Retry); d <= 0 || d > helperBackoffMin {
		t.Errorf("first retry in %s, want within %s", d, helperBackoffMin)
	}
	// The second failure waits twice as long; Retry cuts it short.
	waitFor(t, "a second start", func() bool { return len(e.lines()) >= 2 })
	waitFor(t, "the second failure", func() bool {
		st = e.sup.Status()
		return st.State == HelperFailed && time.Until(st.Retry) > helperBackoffMin
	})
	e.sup.Retry()
	waitFor(t, "a start on Retry", func() bool { return len(e.lines()) >= 3 })
}

// TestSupervisorKillsAStuckHelper: a helper that ignores SIGTERM is killed
// after the grace period, and Close says so.
func TestSupervisorKillsAStuckHelper(t *testing.T) {
	e := newFakeHelper(t, "ignoreterm")
	e.sup.t.Grace = 300 * time.Millisecond
	e.sup.Start()
	e.waitState(t, HelperRunning)
	start := time.Now()
	err := e.sup.Close(context.Background())
	if !errors.Is(err, errHelperKilled) {
		t.Fatalf("Close = %v, want the helper killed", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Close took %s", took)
	}
	if _, err := api.NewClient(e.sock).Status(context.Background()); err == nil {
		t.Error("the killed helper still answers")
	}
}

// TestSupervisorHelperNeverAnswers: a helper that does not answer within
// Ready is stopped and reported.
func TestSupervisorHelperNeverAnswers(t *testing.T) {
	e := newFakeHelper(t, "silent")
	e.sup.t.Ready, e.sup.t.Grace = 300*time.Millisecond, 200*time.Millisecond
	e.sup.Start()
	st := e.waitState(t, HelperFailed)
	if st.Err == nil || !strings.Contains(st.Err.Error(), "killed") {
		t.Fatalf("failure = %v", st.Err)
	}
}

// TestSupervisorMissingHelper: without a helper the app still uses a
// running service, and says the helper is missing when there is none.
func TestSupervisorMissingHelper(t *testing.T) {
	e := newFakeHelper(t, "serve")
	e.sup.missing = errors.New("the Airlock helper (the airlock command) is missing: reinstall Airlock")
	e.sup.Start()
	if st := e.waitState(t, HelperFailed); st.Err != e.sup.missing {
		t.Fatalf("failure = %v", st.Err)
	}
	l, err := api.Listen(e.sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = api.Serve(ctx, l, api.Handler(newFakeCore(session.StateStopped, ""), nil), nil) }()
	e.sup.Retry()
	if st := e.waitState(t, HelperRunning); st.Owned {
		t.Fatal("owned")
	}
}

// TestHelperApp runs the app over a helper: the window and the tray say
// the service failed and why, Start in the tray tries again, the window
// works once the helper answers, and Close stops the helper.
func TestHelperApp(t *testing.T) {
	modeFile := filepath.Join(t.TempDir(), "mode")
	setMode := func(m string) {
		if err := os.WriteFile(modeFile, []byte(m), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	setMode("fail")
	e := newFakeHelper(t, "@"+modeFile)
	a := newApp(Config{UI: testUI, GOOS: "darwin"}, backend{core: api.NewClient(e.sock), helper: e.sup})
	h := &fakeHost{}
	a.tray.ready(h)
	rt := &fakeRuntime{}
	a.Startup(rt)
	waitFor(t, "the tray to say the service failed", func() bool {
		s, _ := h.items[0].State()
		w, _ := h.items[1].State()
		return s == "Airlock: service failed" && strings.Contains(w, "no minimal guest image")
	})
	w := get(t, a.Handler(), "/v1/status")
	var body struct{ Error, Code string }
	_ = json.NewDecoder(w.Body).Decode(&body)
	if w.Code != http.StatusServiceUnavailable || body.Code != "unavailable" || !strings.Contains(body.Error, "no minimal guest image found") {
		t.Fatalf("/v1/status while the helper fails: %d %+v", w.Code, body)
	}
	if w := get(t, a.Handler(), "/"); w.Code != http.StatusOK {
		t.Fatalf("the UI itself: %d", w.Code)
	}

	// Fixed (the image is there now): Start in the tray tries at once.
	setMode("serve")
	waitFor(t, "the tray's Start to be enabled", func() bool { _, en := h.items[3].State(); return en })
	h.items[3].clicks <- struct{}{}
	waitFor(t, "the tray to show the sandbox", func() bool { s, _ := h.items[0].State(); return s == "Sandbox: running" })
	if w := get(t, a.Handler(), "/v1/status"); w.Code != http.StatusOK {
		t.Fatalf("/v1/status with the helper running: %d %s", w.Code, w.Body)
	}
	a.Quit()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if got := e.lines(); got[len(got)-1] != "stopped" {
		t.Fatalf("the helper was not stopped on Quit: %q", got)
	}
	if _, err := net.Dial("unix", e.sock); err == nil {
		t.Error("the helper's socket still answers after Close")
	}
}
