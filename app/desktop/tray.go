package desktop

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/app/service"
	"github.com/airlock-sandbox/airlock/app/session"
)

// trayHost is the system tray as the app uses it; systrayHost implements
// it with fyne.io/systray, tests with a fake.
type trayHost interface {
	SetTooltip(string)
	AddItem(title string) trayItem
	AddSeparator()
}

// trayItem is one menu entry.
type trayItem interface {
	SetTitle(string)
	Enable()
	Disable()
	Clicked() <-chan struct{}
}

// trayActions are what the tray's items do.
type trayActions struct {
	show, review, toggle, quit func()
}

// trayView is what the tray shows; viewOf derives it from a Status.
type trayView struct {
	Status    string // first line, not clickable
	Workspace string // second line, not clickable
	Toggle    string // "Start sandbox" or "Stop sandbox"
	CanToggle bool
	Tooltip   string
	Changes   string // "Review 3 changes…", or that none wait
	CanReview bool
}

// tray keeps the menu in step with the service. Its items are made once
// the platform's tray is ready; a view shown before that is kept.
//
// Only the painter goroutine (and ready, before it starts it) calls the
// host. On macOS every systray call waits for the main thread
// (fyne.io/systray v1.12.2 systray_darwin.m: runInMainThread performs the
// selector with waitUntilDone:YES), and Wails runs OnShutdown on that
// thread once its run loop has stopped (wails v2.16.0
// internal/app/app_production.go: RunMainLoop, then shutdownCallback): a
// call made then never returns. So show never waits for the host, and
// stop abandons a painter stuck in a call instead of waiting for it.
type tray struct {
	act   trayActions
	dirty chan struct{} // a view waits to be painted (capacity 1)
	done  chan struct{} // closed by stop
	once  sync.Once
	// poke asks follow to read the status again now (capacity 1).
	poke chan struct{}
	// down, when set, is what the tray shows while the status cannot be
	// read and the helper is not running (helperView).
	down func() (trayView, bool)

	mu   sync.Mutex
	view trayView
}

// trayMenu are the items ready made.
type trayMenu struct {
	host                            trayHost
	status, folder, toggle, changes trayItem
}

func newTray(act trayActions) *tray {
	return &tray{
		act: act, dirty: make(chan struct{}, 1), done: make(chan struct{}), poke: make(chan struct{}, 1),
		view: trayView{Status: "Airlock: starting", Toggle: "Start sandbox", Tooltip: "Airlock"},
	}
}

// ready builds the menu on host, paints the current view and starts
// answering clicks; the platform's tray calls it once.
func (t *tray) ready(host trayHost) {
	m := &trayMenu{host: host}
	m.status = host.AddItem("")
	m.status.Disable()
	m.folder = host.AddItem("")
	m.folder.Disable()
	host.AddSeparator()
	open := host.AddItem("Open Airlock")
	m.toggle = host.AddItem("")
	m.changes = host.AddItem("")
	host.AddSeparator()
	quit := host.AddItem("Quit Airlock")
	t.mu.Lock()
	v := t.view
	t.mu.Unlock()
	m.paint(v)
	go t.painter(m, v)
	go forEachClick(open, t.act.show)
	go forEachClick(m.toggle, func() { go t.act.toggle() })
	go forEachClick(m.changes, func() {
		if t.act.review != nil {
			t.act.review()
		}
	})
	go forEachClick(quit, t.act.quit)
}

func forEachClick(it trayItem, f func()) {
	for range it.Clicked() {
		f()
	}
}

// show displays v (soon, or once the tray is ready). It never waits for
// the platform's tray.
func (t *tray) show(v trayView) {
	t.mu.Lock()
	t.view = v
	t.mu.Unlock()
	select {
	case t.dirty <- struct{}{}:
	default: // the painter has yet to pick up the last one; it reads the latest
	}
}

// stop ends the painter: no call into the platform's tray starts after
// it. It returns at once, even while a call is under way.
func (t *tray) stop() { t.once.Do(func() { close(t.done) }) }

// painter paints each new view until stop; painted is what ready painted.
func (t *tray) painter(m *trayMenu, painted trayView) {
	for {
		select {
		case <-t.done:
			return
		case <-t.dirty:
		}
		t.mu.Lock()
		v := t.view
		t.mu.Unlock()
		select {
		case <-t.done:
			return
		default:
		}
		if v != painted {
			m.paint(v)
			painted = v
		}
	}
}

func (m *trayMenu) paint(v trayView) {
	m.host.SetTooltip(v.Tooltip)
	m.status.SetTitle(v.Status)
	m.folder.SetTitle(v.Workspace)
	m.toggle.SetTitle(v.Toggle)
	if v.CanToggle {
		m.toggle.Enable()
	} else {
		m.toggle.Disable()
	}
	title := v.Changes
	if title == "" {
		title = "No changes to review"
	}
	m.changes.SetTitle(title)
	if v.CanReview {
		m.changes.Enable()
	} else {
		m.changes.Disable()
	}
}

// refreshSoon makes follow read the status again now; it never waits.
func (t *tray) refreshSoon() {
	select {
	case t.poke <- struct{}{}:
	default:
	}
}

// refreshEvery re-reads the status when no event came: settings changed
// by another client do not make events.
const refreshEvery = 5 * time.Second

// follow keeps the tray current until ctx is done: it re-reads the status
// and the pending changes on each session, task or changes event, and
// every refreshEvery.
func (t *tray) follow(ctx context.Context, core service.Core) {
	refresh := func() {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		st, err := core.Status(sctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil && t.down != nil {
			if v, ok := t.down(); ok {
				t.show(v)
				return
			}
		}
		pending := 0
		if err == nil && st.Settings.Workspace != "" {
			// No store to read (no folder, another process holds it) is
			// nothing to review here.
			if l, cerr := core.Changes(sctx); cerr == nil {
				pending = len(l.Entries)
			}
		}
		t.show(withChanges(viewOf(st, err), pending, err == nil))
	}
	tick := time.NewTicker(refreshEvery)
	defer tick.Stop()
	for ctx.Err() == nil {
		refresh()
		events, err := core.Events(ctx, false)
		if err != nil {
			events = nil // tick only until the next try
		}
	stream:
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				refresh()
				if events == nil {
					break stream
				}
			case <-t.poke:
				refresh()
				if events == nil {
					break stream // the service may be up now: subscribe
				}
			case ev, ok := <-events:
				if !ok {
					break stream
				}
				if ev.Kind != "egress" {
					refresh()
				}
			}
		}
	}
}

// viewOf is what the tray says about st (or about err, when the status
// could not be read).
func viewOf(st service.Status, err error) trayView {
	if err != nil {
		return unavailableView(err)
	}
	s := st.Session
	v := trayView{Toggle: "Stop sandbox", CanToggle: true}
	state := string(s.State)
	switch s.State {
	case session.StateStopped:
		v.Toggle = "Start sandbox"
	case session.StateFailed:
		v.Toggle = "Start sandbox"
		state = "failed (see the window)"
	case session.StateStopping:
		v.CanToggle = false
	case session.StateStarting, session.StateRestarting:
		if s.Phase != "" {
			state += " (" + s.Phase + ")"
		}
	}
	v.Status = "Sandbox: " + state
	switch n := st.RunningTasks; {
	case n == 1:
		v.Status += " · 1 task"
	case n > 1:
		v.Status += fmt.Sprintf(" · %d tasks", n)
	}
	name := folderName(st.Settings.Workspace)
	switch {
	case name == "":
		v.Workspace = "No folder chosen"
		v.Tooltip = "Airlock: " + string(s.State)
	case st.Settings.ReadOnly:
		v.Workspace = "Folder: " + name + " (read-only)"
		v.Tooltip = "Airlock: " + string(s.State) + " · " + name
	default:
		v.Workspace = "Folder: " + name
		v.Tooltip = "Airlock: " + string(s.State) + " · " + name
	}
	return v
}

// withChanges adds what waits for review to v: the count in the menu
// item that opens the Changes screen, and in the tooltip.
func withChanges(v trayView, pending int, available bool) trayView {
	switch {
	case !available:
		v.Changes = "Changes"
	case pending == 0:
		v.Changes = "No changes to review"
	case pending == 1:
		v.Changes, v.CanReview = "Review 1 change…", true
		v.Tooltip += " · 1 change to review"
	default:
		v.Changes, v.CanReview = fmt.Sprintf("Review %d changes…", pending), true
		v.Tooltip += fmt.Sprintf(" · %d changes to review", pending)
	}
	return v
}

func unavailableView(err error) trayView {
	msg := "the service is not available"
	if err != nil {
		msg = firstLine(err.Error(), 60)
	}
	return trayView{Status: "Airlock: unavailable", Workspace: msg, Toggle: "Start sandbox", Tooltip: "Airlock: unavailable"}
}

// folderName is the last element of a workspace path of any OS (the app
// may show a Windows path while tested on Linux).
func folderName(p string) string {
	p = strings.TrimRight(p, `/\`)
	if i := strings.LastIndexAny(p, `/\`); i >= 0 {
		p = p[i+1:]
	}
	return p
}

func firstLine(s string, max int) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if r := []rune(s); len(r) > max {
		s = string(r[:max-1]) + "…"
	}
	return s
}
