package desktop

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// On macOS the app runs no VM itself: vz v3.7.1 (virtualization_view.m)
// and Wails v2.16.0 (internal/frontend/desktop/darwin/AppDelegate.m) both
// define the Objective-C class AppDelegate, so one binary cannot link both
// (vm/platform/withvz). The VM and the host core run in the airlock
// command from the app's bundle, `airlock serve`, signed with the
// virtualization entitlement; the window and the tray are its clients over
// the control socket, as they are of any running `airlock serve`. This
// file finds that helper, starts it when no service answers, restarts it
// with back-off when it fails, stops it on Quit when the app started it,
// and reports where it is. None of it is specific to macOS, so it is
// tested on Linux with a fake helper.

// RunsHelper reports whether the desktop app on goos runs its service in
// the helper process rather than in-process. Only on macOS: the Linux app
// keeps its in-process core (QEMU is another process anyway, and make
// test-desktop tests that shape), and on Windows the VM already lives in
// airlock-vmservice.
func RunsHelper(goos string) bool { return goos == "darwin" }

// HelperState is where the helper service is.
type HelperState string

const (
	// HelperStarting: no service answers yet; the helper is being started.
	HelperStarting HelperState = "starting"
	// HelperRunning: a service answers on the control socket.
	HelperRunning HelperState = "running"
	// HelperFailed: the helper could not be started or ended; Err says
	// why and Retry when it is tried again.
	HelperFailed HelperState = "failed"
	// HelperStopped: the app quit (and stopped the helper if it owned it).
	HelperStopped HelperState = "stopped"
)

// HelperStatus is what the app shows about the service behind it.
type HelperStatus struct {
	State HelperState
	// Owned is true when the app started the process it talks to, which
	// it then stops on Quit; false when it found a service already
	// running (airlock serve in a terminal), which it leaves alone.
	Owned bool
	// Err says why the helper failed.
	Err error
	// Retry is when the next start is tried (HelperFailed only).
	Retry time.Time
}

// helperBundleDir is where a macOS app bundle keeps the helper:
// Airlock.app/Contents/Helpers. Apple lists Contents/Helpers (like
// Contents/MacOS) as a place for "helper apps and tools", signed as nested
// code (TN2206, macOS Code Signing In Depth: nested code), and
// Contents/Resources as the place for what is not code. Contents/MacOS
// cannot hold it: the Mac's default file system ignores case, and
// "airlock" there is the app's own "Airlock". Wails writes only
// Contents/MacOS and Contents/Resources (v2.16.0
// pkg/commands/build/packager.go). From Contents/Helpers the helper finds
// the guest image in ../Resources/images as from Contents/MacOS
// (sandbox.ImageSearchPathFor).
const helperBundleDir = "Helpers"

// helperName is the airlock command's file name on goos.
func helperName(goos string) string {
	if goos == "windows" {
		return "airlock.exe"
	}
	return "airlock"
}

// helperCandidates lists where the helper may be for the app's executable
// exe (symlinks resolved), best first: inside a macOS app bundle its
// Contents/Helpers; then next to the executable (a build of the app in
// bin/ beside bin/airlock).
func helperCandidates(exe, goos string) []string {
	dir := filepath.Dir(filepath.Clean(exe))
	name := helperName(goos)
	var out []string
	contents := filepath.Dir(dir)
	// The Mac's default file system ignores case; compare the way it does.
	if goos == "darwin" && strings.EqualFold(filepath.Base(dir), "MacOS") && strings.EqualFold(filepath.Base(contents), "Contents") &&
		strings.EqualFold(filepath.Ext(filepath.Dir(contents)), ".app") {
		out = append(out, filepath.Join(contents, helperBundleDir, name))
	}
	return append(out, filepath.Join(dir, name))
}

// FindHelper returns the airlock command the app on goos runs as its
// helper, for the app's executable exe: the first of helperCandidates that
// is an executable file and not the app itself (on a case-insensitive disk
// "airlock" beside "Airlock" is the app).
func FindHelper(exe, goos string) (string, error) {
	if resolved, err := filepath.EvalSymlinks(exe); err == nil {
		exe = resolved
	}
	self, selfErr := os.Stat(exe)
	cands := helperCandidates(exe, goos)
	for _, c := range cands {
		fi, err := os.Stat(c)
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if selfErr == nil && os.SameFile(fi, self) {
			continue
		}
		if goos != "windows" && fi.Mode()&0o111 == 0 {
			continue
		}
		return c, nil
	}
	return "", fmt.Errorf("the Airlock helper (the airlock command) is missing: looked for %s; reinstall Airlock, or build the app with `make desktop`", strings.Join(cands, " and "))
}

// helperArgs are the helper's arguments: `airlock serve` on the app's
// control socket, stopping when the app (process appPID) ends, so that an
// app that crashed, or was killed, leaves no helper and no VM behind.
func helperArgs(socket string, appPID int, noBoot, verbose bool) []string {
	args := []string{"--socket", socket, "serve", "--parent-pid", strconv.Itoa(appPID)}
	if noBoot {
		args = append(args, "--no-boot")
	}
	if verbose {
		args = append(args, "-v")
	}
	return args
}

// Back-off between failed starts: helperBackoffMin after the first
// failure, doubling up to helperBackoffMax. A helper that answered for
// helperStable before it ended counts as a first failure again.
const (
	helperBackoffMin = time.Second
	helperBackoffMax = 30 * time.Second
	helperStable     = time.Minute
)

// helperBackoff is the wait before the next start after failures failed
// starts in a row (none before the first start).
func helperBackoff(failures int) time.Duration {
	if failures <= 0 {
		return 0
	}
	d := helperBackoffMin
	for i := 1; i < failures && d < helperBackoffMax; i++ {
		d *= 2
	}
	return min(d, helperBackoffMax)
}

// helperStep is what the supervisor does when nothing is running.
type helperStep int

const (
	stepAttach helperStep = iota // a service answers: use it, leave it running on Quit
	stepStart                    // none answers: start the helper, stop it on Quit
)

// nextStep decides between using a running service and starting one.
func nextStep(answers bool) helperStep {
	if answers {
		return stepAttach
	}
	return stepStart
}

// helperTimeouts bound the helper's start and stop.
type helperTimeouts struct {
	// Ready is how long a started helper may take to answer.
	Ready time.Duration
	// Poll is how often readiness and an attached service are checked.
	Poll time.Duration
	// Grace is how long a stopping helper may take (it stops its VM in
	// order) before it is killed.
	Grace time.Duration
}

var defaultHelperTimeouts = helperTimeouts{Ready: 30 * time.Second, Poll: 250 * time.Millisecond, Grace: CloseTimeout}

// supervisor keeps a service answering on the control socket for the app:
// it attaches to a running one or starts the helper, restarts the helper
// with back-off when it fails, and stops it on Close when it started it.
type supervisor struct {
	path string
	args []string
	env  []string // nil: the app's environment
	// ping reports whether a service answers on the control socket.
	ping     func(context.Context) error
	t        helperTimeouts
	log      *slog.Logger
	onChange func(HelperStatus) // must not block
	// missing says why there is no helper to start (path is ""): a
	// running service is still used.
	missing error

	retry chan struct{} // Retry wakes a back-off wait (capacity 1)
	done  chan struct{} // closed when run returns

	mu     sync.Mutex
	st     HelperStatus
	cancel context.CancelFunc // set by Start
}

func newSupervisor(path string, args []string, ping func(context.Context) error, log *slog.Logger) *supervisor {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &supervisor{
		path: path, args: args, ping: ping, t: defaultHelperTimeouts, log: log,
		retry: make(chan struct{}, 1), done: make(chan struct{}),
		st: HelperStatus{State: HelperStarting},
	}
}

// Status is where the helper is now.
func (s *supervisor) Status() HelperStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st
}

func (s *supervisor) set(st HelperStatus) {
	s.mu.Lock()
	if s.st.State == HelperStopped {
		s.mu.Unlock()
		return // the app quit: nothing moves it back
	}
	s.st = st
	s.mu.Unlock()
	s.log.Debug("helper", "state", st.State, "owned", st.Owned, "err", st.Err)
	if s.onChange != nil {
		s.onChange(st)
	}
}

// Start runs the supervisor until Close.
func (s *supervisor) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	s.mu.Lock()
	if s.cancel != nil {
		s.mu.Unlock()
		cancel()
		return
	}
	s.cancel = cancel
	s.mu.Unlock()
	go func() {
		defer close(s.done)
		s.run(ctx)
	}()
}

// Retry starts the helper now when it is waiting after a failure.
func (s *supervisor) Retry() {
	select {
	case s.retry <- struct{}{}:
	default:
	}
}

// Close stops the supervisor and, when the app started the helper, the
// helper: asked to stop (SIGTERM: airlock serve stops its VM in order),
// killed after Grace. A service the app attached to keeps running. It
// returns when the helper has ended, or when ctx is done.
func (s *supervisor) Close(ctx context.Context) error {
	s.mu.Lock()
	cancel := s.cancel
	s.mu.Unlock()
	if cancel == nil {
		return nil
	}
	cancel()
	select {
	case <-s.done:
	case <-ctx.Done():
		return fmt.Errorf("desktop: the Airlock helper did not stop: %w", ctx.Err())
	}
	st := s.Status()
	s.mu.Lock()
	s.st = HelperStatus{State: HelperStopped, Owned: st.Owned}
	s.mu.Unlock()
	if errors.Is(st.Err, errHelperKilled) {
		return st.Err
	}
	return nil
}

func (s *supervisor) run(ctx context.Context) {
	failures := 0
	for ctx.Err() == nil {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		answers := s.ping(pctx) == nil
		cancel()
		var err error
		var ranFor time.Duration
		switch nextStep(answers) {
		case stepAttach:
			s.set(HelperStatus{State: HelperRunning})
			s.watch(ctx)
			failures = 0
			continue // it went away: start one (or find another)
		case stepStart:
			s.set(HelperStatus{State: HelperStarting, Owned: true})
			ranFor, err = s.runOnce(ctx)
		}
		if ctx.Err() != nil {
			if err != nil {
				s.set(HelperStatus{State: HelperFailed, Owned: true, Err: err})
			}
			return
		}
		if ranFor >= helperStable {
			failures = 0
		}
		failures++
		wait := helperBackoff(failures)
		s.log.Warn("the Airlock helper failed", "err", err, "retry in", wait)
		s.set(HelperStatus{State: HelperFailed, Owned: true, Err: err, Retry: time.Now().Add(wait)})
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-t.C:
		case <-s.retry:
		}
		t.Stop()
	}
}

// watch returns when the attached service stops answering (twice in a
// row) or ctx is done.
func (s *supervisor) watch(ctx context.Context) {
	missed := 0
	tick := time.NewTicker(s.t.Poll * 4)
	defer tick.Stop()
	for missed < 2 {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if s.ping(pctx) != nil {
			missed++
		} else {
			missed = 0
		}
		cancel()
	}
	s.log.Info("the Airlock service the app used stopped answering")
}

// helperKillWait bounds the wait for a killed helper to be reaped.
const helperKillWait = 2 * time.Second

// errHelperKilled marks a helper that had to be killed on Quit.
var errHelperKilled = errors.New("the Airlock helper did not stop in time and was killed")

// runOnce starts the helper, waits for it to answer and then for it to
// end. It returns how long it answered and why it ended; on ctx done it
// stops the helper and returns nil unless it had to kill it.
func (s *supervisor) runOnce(ctx context.Context) (time.Duration, error) {
	if s.missing != nil {
		return 0, s.missing
	}
	out := newTailWriter(s.log)
	cmd := exec.Command(s.path, s.args...)
	cmd.Env = s.env
	cmd.Stdout, cmd.Stderr = out, out
	// A child that keeps the output pipe open must not hold up Wait.
	cmd.WaitDelay = 2 * time.Second
	helperProcAttr(cmd)
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("the Airlock helper did not start: %w", err)
	}
	s.log.Info("started the Airlock helper", "path", s.path, "pid", cmd.Process.Pid)
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	ready := time.NewTimer(s.t.Ready)
	defer ready.Stop()
	poll := time.NewTicker(s.t.Poll)
	defer poll.Stop()
	var up time.Time
	for up.IsZero() {
		select {
		case <-ctx.Done():
			return 0, s.stop(cmd, exited)
		case err := <-exited:
			return 0, exitReason(err, out.last())
		case <-ready.C:
			if err := s.stop(cmd, exited); err != nil {
				return 0, err
			}
			return 0, fmt.Errorf("the Airlock helper did not answer within %s; it was stopped", s.t.Ready)
		case <-poll.C:
			pctx, cancel := context.WithTimeout(ctx, s.t.Poll*4)
			if s.ping(pctx) == nil {
				up = time.Now()
				s.set(HelperStatus{State: HelperRunning, Owned: true})
			}
			cancel()
		}
	}
	select {
	case <-ctx.Done():
		return time.Since(up), s.stop(cmd, exited)
	case err := <-exited:
		return time.Since(up), exitReason(err, out.last())
	}
}

// stop asks the helper to stop and kills it after Grace; it returns
// errHelperKilled when it had to kill it.
func (s *supervisor) stop(cmd *exec.Cmd, exited <-chan error) error {
	if err := helperTerminate(cmd.Process); err != nil {
		_ = cmd.Process.Kill()
	}
	t := time.NewTimer(s.t.Grace)
	defer t.Stop()
	select {
	case <-exited:
		s.log.Info("the Airlock helper stopped")
		return nil
	case <-t.C:
	}
	_ = cmd.Process.Kill()
	select {
	case <-exited:
	case <-time.After(helperKillWait):
	}
	return fmt.Errorf("%w (after %s)", errHelperKilled, s.t.Grace)
}

// helperExit is why the helper ended: how it exited and its last line
// (airlock prints its error last, as "airlock: ...").
type helperExit struct {
	how  string // "exited (exit status 1)"
	last string // "no minimal guest image found; ..."
}

func (e *helperExit) Error() string {
	if e.last == "" {
		return "the Airlock helper " + e.how
	}
	return "the Airlock helper " + e.how + ": " + e.last
}

// exitReason says why the helper ended, from Wait's error and its last
// line of output.
func exitReason(err error, last string) error {
	e := &helperExit{how: "exited", last: strings.TrimPrefix(strings.TrimSpace(last), "airlock: ")}
	if err != nil {
		e.how = "exited (" + err.Error() + ")"
	}
	return e
}

// tailWriter logs the helper's output line by line (at debug level) and
// keeps its last line. Lines are cut at maxHelperLine bytes.
type tailWriter struct {
	log *slog.Logger

	mu       sync.Mutex
	partial  []byte
	lastLine string
}

const maxHelperLine = 1024

func newTailWriter(log *slog.Logger) *tailWriter { return &tailWriter{log: log} }

func (w *tailWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, b := range p {
		if b == '\n' {
			w.line()
			continue
		}
		if len(w.partial) < maxHelperLine {
			w.partial = append(w.partial, b)
		}
	}
	return len(p), nil
}

func (w *tailWriter) line() {
	s := strings.TrimSpace(strings.ToValidUTF8(string(w.partial), "?"))
	w.partial = w.partial[:0]
	if s == "" {
		return
	}
	w.lastLine = s
	w.log.Debug("helper: " + s)
}

// last is the last line written, or the unfinished one.
func (w *tailWriter) last() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.partial) > 0 {
		w.line()
	}
	return w.lastLine
}

// helperView is what the tray shows while the helper is not running; ok
// is false when it is (the service's own status is shown then).
func helperView(st HelperStatus) (v trayView, ok bool) {
	switch st.State {
	case HelperStarting:
		return trayView{Status: "Airlock: starting", Workspace: "Starting the Airlock service", Toggle: "Start sandbox", Tooltip: "Airlock: starting"}, true
	case HelperFailed:
		msg := "the Airlock service failed"
		var exit *helperExit
		switch {
		case errors.As(st.Err, &exit) && exit.last != "":
			msg = firstLine(exit.last, 60) // the helper's own words; the menu is narrow
		case st.Err != nil:
			msg = firstLine(st.Err.Error(), 60)
		}
		return trayView{Status: "Airlock: service failed", Workspace: msg, Toggle: "Start the service again", CanToggle: true, Tooltip: "Airlock: the service failed"}, true
	case HelperStopped:
		return trayView{Status: "Airlock: quitting", Toggle: "Start sandbox", Tooltip: "Airlock: quitting"}, true
	}
	return trayView{}, false
}

// helperMessage is what the window's API answers say while the helper is
// not running, at now.
func helperMessage(st HelperStatus, now time.Time) string {
	switch st.State {
	case HelperStarting:
		return "the Airlock service is starting"
	case HelperFailed:
		msg := "the Airlock service failed"
		if st.Err != nil {
			msg = st.Err.Error()
		}
		if !st.Retry.IsZero() {
			msg += fmt.Sprintf("; trying again in %s (or choose Start the service again in the menu bar)", max(st.Retry.Sub(now), 0).Round(time.Second))
		}
		return msg
	case HelperStopped:
		return "Airlock is quitting"
	}
	return ""
}

// helperGate answers the window's API requests with 503 and the helper's
// state while the helper is not running, so the window says "starting" or
// why it failed rather than that a socket refused; otherwise it passes
// them on.
func helperGate(next http.Handler, status func() HelperStatus) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st := status()
		if st.State == HelperRunning || !strings.HasPrefix(r.URL.Path, "/v1/") {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write(jsonError(helperMessage(st, time.Now()), "unavailable"))
	})
}
