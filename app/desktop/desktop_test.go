package desktop

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/airlock-sandbox/airlock/app/service"
	"github.com/airlock-sandbox/airlock/app/session"
	"github.com/airlock-sandbox/airlock/app/settings"
	"github.com/airlock-sandbox/airlock/app/tasks"
	"github.com/airlock-sandbox/airlock/frontend"
)

var testUI = frontend.NewHandler(fstest.MapFS{
	"index.html":    {Data: []byte("<!doctype html><title>UI</title>")},
	"assets/app.js": {Data: []byte("console.log(1)")},
})

func get(t *testing.T, h http.Handler, path string) *httptest.ResponseRecorder {
	t.Helper()
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
	return w
}

func TestHandlerRoutes(t *testing.T) {
	core := newFakeCore(session.StateRunning, "/home/u/reports")
	h := Handler(core, nil, testUI, true, nil)
	down := Handler(nil, errors.New("no guest image found; build it with `make image`"), testUI, true, nil)
	bare := Handler(core, nil, frontend.NewHandler(fstest.MapFS{}), true, nil)
	for _, tc := range []struct {
		name     string
		h        http.Handler
		path     string
		code     int
		contains string
	}{
		{"index", h, "/", 200, "<title>UI</title>"},
		{"index by name", h, "/index.html", 200, "<title>UI</title>"},
		{"asset", h, "/assets/app.js", 200, "console.log"},
		{"UI route falls back to index", h, "/tasks/42", 200, "<title>UI</title>"},
		{"API", h, "/v1/status", 200, `"workspace":"/home/u/reports"`},
		{"API unknown route", h, "/v1/nope", 404, ""},
		{"API without a core says why", down, "/v1/status", 503, "make image"},
		{"UI without a core still loads", down, "/", 200, "<title>UI</title>"},
		{"UI not built", bare, "/", 503, "make frontend"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := get(t, tc.h, tc.path)
			if w.Code != tc.code || !strings.Contains(w.Body.String(), tc.contains) {
				t.Fatalf("GET %s = %d %q, want %d containing %q", tc.path, w.Code, w.Body.String(), tc.code, tc.contains)
			}
		})
	}
}

func TestStreamsSupported(t *testing.T) {
	for goos, want := range map[string]bool{"linux": false, "darwin": true, "windows": false} {
		if got := StreamsSupported(goos); got != want {
			t.Errorf("StreamsSupported(%q) = %v, want %v", goos, got, want)
		}
	}
}

// streamOpen runs one request and reports whether it was still open after
// wait, and what it wrote.
func streamOpen(t *testing.T, h http.Handler, path string, wait time.Duration) (bool, *httptest.ResponseRecorder) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := httptest.NewRecorder()
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.ServeHTTP(w, httptest.NewRequest("GET", path, nil).WithContext(ctx))
	}()
	select {
	case <-done:
		return false, w
	case <-time.After(wait):
		cancel()
		<-done
		return true, w
	}
}

func TestCutStreams(t *testing.T) {
	streamer := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("quiet") == "" {
			io.WriteString(w, "{}\n")
		}
		<-r.Context().Done()
	})
	cut := cutStreams(streamer, 500*time.Millisecond, 10*time.Millisecond)
	for _, tc := range []struct {
		path     string
		wantOpen bool
	}{
		{"/v1/events", false},
		{"/v1/events?answer=1", false},
		{"/v1/tasks/7/log?follow=1&offset=10", false},
		{"/v1/egress/log?follow=1", false},
		{"/v1/tasks/7/wait", true}, // ends by itself; not cut
	} {
		t.Run(tc.path, func(t *testing.T) {
			start := time.Now()
			open, w := streamOpen(t, cut, tc.path, 2*time.Second)
			if open != tc.wantOpen {
				t.Fatalf("still open after 2s = %v, want %v", open, tc.wantOpen)
			}
			if !open && time.Since(start) > 300*time.Millisecond {
				t.Fatalf("a stream with news ended after %v, want soon after its first line", time.Since(start))
			}
			if !tc.wantOpen && (w.Header().Get(StreamHeader) != "poll" || w.Body.String() != "{}\n") {
				t.Fatalf("cut stream: header %q body %q", w.Header().Get(StreamHeader), w.Body.String())
			}
		})
	}
}

func TestQuietStreamEndsAfterTheWindow(t *testing.T) {
	streamer := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "\n") // a keepalive is no news
		<-r.Context().Done()
	})
	start := time.Now()
	open, w := streamOpen(t, cutStreams(streamer, 300*time.Millisecond, time.Millisecond), "/v1/events", 2*time.Second)
	if took := time.Since(start); open || took < 300*time.Millisecond {
		t.Fatalf("quiet stream: open=%v after %v, want it ended at 300ms", open, took)
	}
	if w.Header().Get(StreamHeader) != "poll" {
		t.Fatal("no poll header")
	}
}

func TestWindowsEventsArePolled(t *testing.T) {
	core := newFakeCore(session.StateRunning, "")
	core.events <- service.Event{Kind: "task", Task: &tasks.Event{Kind: "started"}}
	win := newApp(Config{UI: testUI, GOOS: "windows"}, backend{core: core})
	open, w := streamOpen(t, win.Handler(), "/v1/events", 10*time.Second)
	if open {
		t.Fatal("windows: /v1/events still open, want it cut")
	}
	if !strings.Contains(w.Body.String(), `"kind":"task"`) || w.Header().Get(StreamHeader) != "poll" {
		t.Fatalf("windows: got %q (header %q), want the queued event", w.Body.String(), w.Header().Get(StreamHeader))
	}
	mac := newApp(Config{UI: testUI, GOOS: "darwin"}, backend{core: core})
	if open, _ := streamOpen(t, mac.Handler(), "/v1/events", PollWindow+time.Second); !open {
		t.Fatal("darwin: /v1/events ended, want a stream that stays open")
	}
}

func TestViewOf(t *testing.T) {
	st := func(state session.State, phase, ws string, ro bool, running int) service.Status {
		return service.Status{
			Session:      session.Status{State: state, Phase: phase},
			Settings:     settings.Settings{Workspace: ws, ReadOnly: ro},
			RunningTasks: running,
		}
	}
	for _, tc := range []struct {
		name string
		st   service.Status
		err  error
		want trayView
	}{
		{"running", st(session.StateRunning, "", "/home/u/reports", false, 0), nil,
			trayView{"Sandbox: running", "Folder: reports", "Stop sandbox", true, "Airlock: running · reports", "", false}},
		{"tasks and read-only", st(session.StateRunning, "", "/home/u/reports/", true, 3), nil,
			trayView{"Sandbox: running · 3 tasks", "Folder: reports (read-only)", "Stop sandbox", true, "Airlock: running · reports", "", false}},
		{"one task", st(session.StateRunning, "", `C:\Users\u\Reports`, false, 1), nil,
			trayView{"Sandbox: running · 1 task", "Folder: Reports", "Stop sandbox", true, "Airlock: running · Reports", "", false}},
		{"booting", st(session.StateStarting, session.PhaseWaitingForGuest, "/w", false, 0), nil,
			trayView{"Sandbox: starting (waiting for guest)", "Folder: w", "Stop sandbox", true, "Airlock: starting · w", "", false}},
		{"stopped, no folder", st(session.StateStopped, "", "", false, 0), nil,
			trayView{"Sandbox: stopped", "No folder chosen", "Start sandbox", true, "Airlock: stopped", "", false}},
		{"stopping", st(session.StateStopping, "", "", false, 0), nil,
			trayView{"Sandbox: stopping", "No folder chosen", "Stop sandbox", false, "Airlock: stopping", "", false}},
		{"failed", st(session.StateFailed, "", "/w", false, 0), nil,
			trayView{"Sandbox: failed (see the window)", "Folder: w", "Start sandbox", true, "Airlock: failed · w", "", false}},
		{"unreachable", service.Status{}, errors.New("dial unix: connection refused\nmore"),
			trayView{"Airlock: unavailable", "dial unix: connection refused", "Start sandbox", false, "Airlock: unavailable", "", false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := viewOf(tc.st, tc.err); got != tc.want {
				t.Fatalf("viewOf =\n %+v, want\n %+v", got, tc.want)
			}
		})
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestTrayMenu(t *testing.T) {
	var shown, toggled, quit chan struct{} = make(chan struct{}, 1), make(chan struct{}, 1), make(chan struct{}, 1)
	reviewed := make(chan struct{}, 1)
	tr := newTray(trayActions{
		show:   func() { shown <- struct{}{} },
		review: func() { reviewed <- struct{}{} },
		toggle: func() { toggled <- struct{}{} },
		quit:   func() { quit <- struct{}{} },
	})
	// A view shown before the platform's tray is ready is kept.
	tr.show(trayView{Status: "Sandbox: stopped", Workspace: "No folder chosen", Toggle: "Start sandbox", CanToggle: true, Tooltip: "Airlock: stopped"})
	h := &fakeHost{}
	tr.ready(h)
	var titles []string
	for _, it := range h.items {
		title, _ := it.State()
		titles = append(titles, title)
	}
	want := []string{"Sandbox: stopped", "No folder chosen", "Open Airlock", "Start sandbox", "No changes to review", "Quit Airlock"}
	if !slices.Equal(titles, want) || h.seps != 2 || h.Tooltip() != "Airlock: stopped" {
		t.Fatalf("menu = %q (%d separators, tooltip %q), want %q", titles, h.seps, h.Tooltip(), want)
	}
	if _, enabled := h.items[0].State(); enabled {
		t.Error("the status line is clickable")
	}
	tr.show(trayView{Status: "Sandbox: stopping", Toggle: "Stop sandbox", CanToggle: false})
	waitFor(t, "a disabled Stop sandbox", func() bool {
		title, enabled := h.items[3].State()
		return title == "Stop sandbox" && !enabled
	})
	if _, enabled := h.items[4].State(); enabled {
		t.Error("review is clickable with no changes")
	}
	tr.show(withChanges(trayView{Status: "Sandbox: running", Toggle: "Stop sandbox", CanToggle: true, Tooltip: "Airlock: running"}, 3, true))
	waitFor(t, "the changes to review", func() bool {
		title, enabled := h.items[4].State()
		return title == "Review 3 changes…" && enabled && h.Tooltip() == "Airlock: running · 3 changes to review"
	})
	for i, ch := range map[int]chan struct{}{2: shown, 3: toggled, 4: reviewed, 5: quit} {
		h.items[i].clicks <- struct{}{}
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatalf("click on %q did nothing", want[i])
		}
	}
}

func TestAppLifecycle(t *testing.T) {
	core := newFakeCore(session.StateStopped, "/home/u/reports")
	a := newApp(Config{UI: testUI, GOOS: "linux"}, backend{core: core})
	// Before Startup there is no window to act on.
	a.ShowWindow()
	a.Quit()
	if _, err := a.Bindings().ChooseFolder("Choose", ""); err == nil {
		t.Fatal("ChooseFolder before Startup: no error")
	}
	h := &fakeHost{}
	a.tray.ready(h)
	rt := &fakeRuntime{folder: "/home/u/new"}
	a.Startup(rt)
	<-core.subbed
	waitFor(t, "the tray to show the status", func() bool { s, _ := h.items[0].State(); return s == "Sandbox: stopped" })

	// A session event refreshes the tray.
	core.setState(session.StateRunning)
	core.events <- service.Event{Kind: "session"}
	waitFor(t, "the tray to follow the session", func() bool { s, _ := h.items[0].State(); return s == "Sandbox: running" })

	// Changes waiting for review: the tray counts them, and its item opens
	// the window on the Changes screen.
	core.setPending(2)
	core.events <- service.Event{Kind: "changes", Type: "changes"}
	waitFor(t, "the tray to count the changes", func() bool { s, en := h.items[4].State(); return s == "Review 2 changes…" && en })
	h.items[4].clicks <- struct{}{}
	waitFor(t, "the window on the Changes screen", func() bool {
		c := rt.Calls()
		return len(c) >= 2 && c[len(c)-2] == "show" && c[len(c)-1] == "screen changes"
	})

	b := a.Bindings()
	if dir, err := b.ChooseFolder("Choose a folder", "/home/u"); err != nil || dir != "/home/u/new" {
		t.Fatalf("ChooseFolder = %q, %v", dir, err)
	}
	b.ShowWindow()
	b.Quit()
	a.Quit() // the tray's Quit after the window's (or a second SIGTERM): quits once
	if b.Streams() {
		t.Error("Streams() = true on linux")
	}
	if got, want := rt.Calls(), []string{"show", "screen changes", "choose Choose a folder /home/u", "show", "quit"}; !slices.Equal(got, want) {
		t.Fatalf("runtime calls = %q, want %q", got, want)
	}

	a.ToggleVM() // running → stop
	core.setState(session.StateStopped)
	a.ToggleVM() // stopped → start
	if got, want := core.Calls(), []string{"stop", "start"}; !slices.Equal(got, want) {
		t.Fatalf("core calls = %q, want %q", got, want)
	}

	done := make(chan struct{})
	go func() { a.Close(); a.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not stop the background work")
	}
}

func TestUnavailableApp(t *testing.T) {
	a := newApp(Config{UI: testUI}, backend{err: errors.New("no guest image found")})
	h := &fakeHost{}
	a.tray.ready(h)
	a.Startup(&fakeRuntime{})
	waitFor(t, "the tray to say why", func() bool { s, _ := h.items[1].State(); return s == "no guest image found" })
	a.ToggleVM() // nothing to toggle; must not panic
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestBindingsSurface keeps what JavaScript can call small, and in step
// with frontend/wailsjs (make check-wailsjs regenerates it).
func TestBindingsSurface(t *testing.T) {
	typ := reflect.TypeOf(&Bindings{})
	var got []string
	for i := range typ.NumMethod() {
		got = append(got, typ.Method(i).Name)
	}
	sort.Strings(got)
	if want := []string{"ChooseFolder", "Quit", "ShowWindow", "Streams"}; !slices.Equal(got, want) {
		t.Fatalf("Bindings methods = %q, want %q", got, want)
	}
}

// TestQuitDuringTrayUpdate quits while a tray update waits for a main
// thread that will never serve it, as on macOS when Wails runs OnShutdown
// on that thread after its run loop stopped: Close must still end, well
// within backgroundWait (so not merely because that bound ran out).
func TestQuitDuringTrayUpdate(t *testing.T) {
	core := newFakeCore(session.StateStopped, "/home/u/reports")
	a := newApp(Config{UI: testUI, GOOS: "darwin"}, backend{core: core})
	h := newMainThreadHost(t)
	a.tray.ready(h)
	rt := &fakeRuntime{}
	a.Startup(rt)
	<-core.subbed
	waitFor(t, "the tray to show the status", func() bool { s, _ := h.items[0].State(); return s == "Sandbox: stopped" })

	h.stopLoop() // Wails' run loop has stopped
	core.setState(session.StateRunning)
	core.events <- service.Event{Kind: "session"}
	select {
	case <-h.blocked:
	case <-time.After(5 * time.Second):
		t.Fatal("the tray update never reached the tray")
	}

	a.Quit()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- a.Close() }() // Wails' OnShutdown
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(backgroundWait + 5*time.Second):
		t.Fatal("Close hung behind a tray update waiting for the main thread")
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("Close took %s: it waited for the stuck tray update until its bound", took)
	}
	if got := rt.Calls(); !slices.Equal(got, []string{"quit"}) {
		t.Errorf("runtime calls = %q, want one quit", got)
	}
}
