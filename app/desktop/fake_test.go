package desktop

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/airlock-sandbox/airlock/app/changes"
	"github.com/airlock-sandbox/airlock/app/service"
	"github.com/airlock-sandbox/airlock/app/session"
	"github.com/airlock-sandbox/airlock/app/settings"
)

// fakeCore answers the few Core calls the app makes; the embedded nil
// interface panics on any other, which would be a bug here.
type fakeCore struct {
	service.Core

	mu      sync.Mutex
	status  service.Status
	calls   []string
	events  chan service.Event
	subbed  chan struct{}
	statusN int
	pending int
}

func newFakeCore(state session.State, workspace string) *fakeCore {
	return &fakeCore{
		status: service.Status{
			Session:  session.Status{State: state},
			Settings: settings.Settings{Workspace: workspace},
		},
		events: make(chan service.Event, 8),
		subbed: make(chan struct{}, 8),
	}
}

func (f *fakeCore) setPending(n int) {
	f.mu.Lock()
	f.pending = n
	f.mu.Unlock()
}

// Changes lists pending made-up changes.
func (f *fakeCore) Changes(context.Context) (service.ChangesList, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l := service.ChangesList{Mode: "review"}
	for i := range f.pending {
		l.Entries = append(l.Entries, changes.Entry{Path: fmt.Sprintf("f%d", i), Kind: changes.Added})
	}
	return l, nil
}

func (f *fakeCore) setState(s session.State) {
	f.mu.Lock()
	f.status.Session.State = s
	f.mu.Unlock()
}

func (f *fakeCore) Status(ctx context.Context) (service.Status, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.statusN++
	return f.status, ctx.Err()
}

func (f *fakeCore) record(c string) {
	f.mu.Lock()
	f.calls = append(f.calls, c)
	f.mu.Unlock()
}

func (f *fakeCore) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeCore) StartVM(context.Context) error { f.record("start"); return nil }
func (f *fakeCore) StopVM(context.Context) error  { f.record("stop"); return nil }

func (f *fakeCore) Events(ctx context.Context, answer bool) (<-chan service.Event, error) {
	if answer {
		return nil, errors.New("the tray must not answer asks")
	}
	out := make(chan service.Event)
	go func() {
		defer close(out)
		for {
			select {
			case <-ctx.Done():
				return
			case ev := <-f.events:
				select {
				case out <- ev:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	f.subbed <- struct{}{}
	return out, nil
}

// fakeRuntime records the window calls.
type fakeRuntime struct {
	mu     sync.Mutex
	calls  []string
	folder string
}

func (r *fakeRuntime) record(c string) {
	r.mu.Lock()
	r.calls = append(r.calls, c)
	r.mu.Unlock()
}

func (r *fakeRuntime) Calls() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.calls...)
}

func (r *fakeRuntime) ShowWindow() { r.record("show") }
func (r *fakeRuntime) Quit()       { r.record("quit") }
func (r *fakeRuntime) ShowScreen(screen string) {
	r.record("screen " + screen)
}
func (r *fakeRuntime) ChooseFolder(title, dir string) (string, error) {
	r.record("choose " + title + " " + dir)
	return r.folder, nil
}

// fakeHost is a tray with items that remember their state.
type fakeHost struct {
	mu      sync.Mutex
	tooltip string
	items   []*fakeItem
	seps    int
}

func (h *fakeHost) SetTooltip(s string) { h.mu.Lock(); h.tooltip = s; h.mu.Unlock() }
func (h *fakeHost) AddSeparator()       { h.mu.Lock(); h.seps++; h.mu.Unlock() }
func (h *fakeHost) AddItem(title string) trayItem {
	it := &fakeItem{title: title, enabled: true, clicks: make(chan struct{})}
	h.mu.Lock()
	h.items = append(h.items, it)
	h.mu.Unlock()
	return it
}

func (h *fakeHost) Tooltip() string { h.mu.Lock(); defer h.mu.Unlock(); return h.tooltip }

type fakeItem struct {
	mu      sync.Mutex
	title   string
	enabled bool
	clicks  chan struct{}
}

func (i *fakeItem) SetTitle(s string)        { i.mu.Lock(); i.title = s; i.mu.Unlock() }
func (i *fakeItem) Enable()                  { i.mu.Lock(); i.enabled = true; i.mu.Unlock() }
func (i *fakeItem) Disable()                 { i.mu.Lock(); i.enabled = false; i.mu.Unlock() }
func (i *fakeItem) Clicked() <-chan struct{} { return i.clicks }
func (i *fakeItem) State() (string, bool) {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.title, i.enabled
}

// mainThreadHost is the macOS tray as Wails' shutdown leaves it: each call
// waits for the main thread (systray's waitUntilDone:YES), and once
// loopStopped, that thread never serves it again: the call blocks until
// the test ends.
type mainThreadHost struct {
	*fakeHost
	stopped atomic.Bool
	blocked chan struct{} // a call is blocked (capacity 1)
	end     chan struct{} // closed when the test ends
}

func newMainThreadHost(t *testing.T) *mainThreadHost {
	h := &mainThreadHost{fakeHost: &fakeHost{}, blocked: make(chan struct{}, 1), end: make(chan struct{})}
	t.Cleanup(func() { close(h.end) })
	return h
}

func (h *mainThreadHost) stopLoop() { h.stopped.Store(true) }

func (h *mainThreadHost) wait() {
	if !h.stopped.Load() {
		return
	}
	select {
	case h.blocked <- struct{}{}:
	default:
	}
	<-h.end
}

func (h *mainThreadHost) SetTooltip(s string) { h.wait(); h.fakeHost.SetTooltip(s) }
func (h *mainThreadHost) AddSeparator()       { h.wait(); h.fakeHost.AddSeparator() }
func (h *mainThreadHost) AddItem(title string) trayItem {
	h.wait()
	return &mainThreadItem{h.fakeHost.AddItem(title).(*fakeItem), h}
}

type mainThreadItem struct {
	*fakeItem
	h *mainThreadHost
}

func (i *mainThreadItem) SetTitle(s string) { i.h.wait(); i.fakeItem.SetTitle(s) }
func (i *mainThreadItem) Enable()           { i.h.wait(); i.fakeItem.Enable() }
func (i *mainThreadItem) Disable()          { i.h.wait(); i.fakeItem.Disable() }
