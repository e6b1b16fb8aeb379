package desktop

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/app/api"
	"github.com/airlock-sandbox/airlock/app/session"
)

// Config configures the desktop app.
type Config struct {
	// UI serves the web UI (frontend.Handler()).
	UI http.Handler
	// NoBoot leaves the VM stopped until the first task or a start, like
	// `airlock serve --no-boot`.
	NoBoot bool
	// GOOS is the platform the app runs on (runtime.GOOS); it decides
	// whether the window gets streams or long polls, and whether the
	// service runs in the helper process (RunsHelper).
	GOOS string
	// Verbose makes the helper log what it does (airlock serve -v); its
	// output reaches Logger at debug level.
	Verbose bool
	Logger  *slog.Logger
}

// CloseTimeout bounds the service's shutdown on quit: stopping the VM in
// order, then killing it.
const CloseTimeout = 20 * time.Second

// backgroundWait bounds how long Close waits for the background work
// (control socket, VM start, tray updates) after cancelling it; the
// process is quitting, so work that does not end by then is left behind.
const backgroundWait = 5 * time.Second

// App is the desktop app over the host core: the window's handler, the
// Wails lifecycle hooks, and the actions of the tray and the bindings.
type App struct {
	cfg     Config
	log     *slog.Logger
	be      backend
	handler http.Handler
	tray    *tray

	mu     sync.Mutex
	rt     Runtime            // set by Startup
	cancel context.CancelFunc // ends the background work of Startup
	bg     sync.WaitGroup
	closed sync.Once
	quit   sync.Once
}

// New opens the user's Airlock service (or connects to the running one;
// on macOS it always connects, and Startup starts the helper when no
// service answers) and returns the app over it. When neither works the
// app still opens its window, whose API calls answer 503 with the reason.
func New(cfg Config) *App {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.GOOS == "" {
		cfg.GOOS = runtime.GOOS
	}
	be := openBackend(cfg)
	if be.err != nil {
		cfg.Logger.Error("the Airlock service did not open", "err", be.err)
	}
	return newApp(cfg, be)
}

func newApp(cfg Config, be backend) *App {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.GOOS == "" {
		cfg.GOOS = runtime.GOOS
	}
	a := &App{cfg: cfg, log: cfg.Logger, be: be}
	a.handler = Handler(be.core, be.err, cfg.UI, StreamsSupported(cfg.GOOS), cfg.Logger, agentsAPI(cfg.GOOS))
	a.tray = newTray(trayActions{show: a.ShowWindow, review: a.ShowChanges, toggle: a.ToggleVM, quit: a.Quit})
	if be.helper != nil {
		a.handler = helperGate(a.handler, be.helper.Status)
		a.tray.down = func() (trayView, bool) { return helperView(be.helper.Status()) }
		be.helper.onChange = func(HelperStatus) { a.tray.refreshSoon() }
	}
	return a
}

// Handler serves the window: the UI and the control API under /v1/.
func (a *App) Handler() http.Handler { return a.handler }

// Bindings returns what the window's JavaScript may call.
func (a *App) Bindings() *Bindings { return &Bindings{app: a} }

// Startup is Wails' OnStartup: it keeps the runtime, serves the control
// socket for the CLI and MCP, boots the VM and keeps the tray current. With
// a helper it starts the helper's supervisor instead of serving and
// booting: the helper does both.
func (a *App) Startup(rt Runtime) {
	ctx, cancel := context.WithCancel(context.Background())
	a.mu.Lock()
	a.rt, a.cancel = rt, cancel
	a.mu.Unlock()
	if a.be.helper != nil {
		a.be.helper.Start()
	}
	if a.be.socket != nil {
		a.goBackground(func() {
			if err := api.Serve(ctx, a.be.socket, api.Handler(a.be.core, a.log), a.log); err != nil {
				a.log.Warn("control socket", "err", err)
			}
		})
	}
	if a.be.svc != nil && !a.cfg.NoBoot {
		a.goBackground(func() {
			if err := a.be.svc.StartVM(ctx); err != nil && ctx.Err() == nil {
				a.log.Warn("the VM did not start", "err", err)
			}
		})
	}
	if a.be.core != nil {
		a.goBackground(func() { a.tray.follow(ctx, a.be.core) })
	} else {
		a.tray.show(unavailableView(a.be.err))
	}
}

func (a *App) goBackground(f func()) {
	a.bg.Add(1)
	go func() {
		defer a.bg.Done()
		f()
	}()
}

// Shutdown is Wails' OnShutdown: see Close.
func (a *App) Shutdown() { a.Close() }

// Close stops the tray and the background work and closes the service the
// app owns, VM included: the in-process one, or the helper process the
// app started. A service the app only connected to keeps running. Every
// wait in it is bounded: it returns within CloseTimeout plus
// backgroundWait (and a few seconds) whatever hangs. It is safe to call
// more than once.
//
// Wails calls it (OnShutdown) on the main thread after its run loop has
// stopped, so the tray stops first: on macOS a tray update waits for that
// thread and would never end (see tray).
func (a *App) Close() error {
	var err error
	a.closed.Do(func() {
		a.tray.stop()
		a.mu.Lock()
		cancel := a.cancel
		a.mu.Unlock()
		if cancel != nil {
			cancel()
		}
		if a.be.svc != nil {
			ctx, cancel := context.WithTimeout(context.Background(), CloseTimeout)
			defer cancel()
			errc := make(chan error, 1)
			if within(CloseTimeout+time.Second, func() { errc <- a.be.svc.Close(ctx) }) {
				err = <-errc
			} else {
				err = fmt.Errorf("desktop: the service did not close within %s; quitting anyway", CloseTimeout)
			}
		}
		if a.be.helper != nil {
			ctx, cancel := context.WithTimeout(context.Background(), CloseTimeout+helperKillWait+time.Second)
			defer cancel()
			if herr := a.be.helper.Close(ctx); herr != nil {
				err = herr
			}
		}
		if a.be.socket != nil {
			a.be.socket.Close() // Serve closed it if Startup ran
		}
		if !within(backgroundWait, a.bg.Wait) {
			a.log.Warn("background work did not end; quitting anyway", "waited", backgroundWait)
		}
	})
	return err
}

// within runs f and reports whether it returned within d; f runs on
// (and is left behind) when it did not.
func within(d time.Duration, f func()) bool {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

func (a *App) runtime() Runtime {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.rt
}

// ShowWindow brings the window back; before Startup it does nothing.
func (a *App) ShowWindow() {
	if rt := a.runtime(); rt != nil {
		rt.ShowWindow()
	}
}

// ShowChanges brings the window back on its Changes screen (the tray's
// item when changes wait for review).
func (a *App) ShowChanges() {
	if rt := a.runtime(); rt != nil {
		rt.ShowWindow()
		rt.ShowScreen("changes")
	}
}

// Quit ends the app: Wails calls Shutdown, which stops the VM. Only the
// first call after Startup quits: Wails' Quit on Linux calls gtk_main_quit
// from the caller's goroutine, and a second call can run into GTK tearing
// down after the first.
func (a *App) Quit() {
	if rt := a.runtime(); rt != nil {
		a.quit.Do(rt.Quit)
	}
}

// ChooseFolder shows the native folder dialog; "" means cancelled.
func (a *App) ChooseFolder(title, dir string) (string, error) {
	rt := a.runtime()
	if rt == nil {
		return "", errors.New("desktop: the window is not ready")
	}
	return rt.ChooseFolder(title, dir)
}

// ToggleVM starts a stopped VM and stops a running one (the tray's item);
// while the helper is down it starts the helper now.
func (a *App) ToggleVM() {
	core := a.be.core
	if core == nil {
		return
	}
	if h := a.be.helper; h != nil && h.Status().State != HelperRunning {
		h.Retry()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	st, err := core.Status(ctx)
	if err != nil {
		a.log.Warn("status", "err", err)
		return
	}
	switch st.Session.State {
	case session.StateStopped, session.StateFailed:
		err = core.StartVM(ctx)
	default:
		err = core.StopVM(ctx)
	}
	if err != nil {
		a.log.Warn("start/stop from the tray", "err", err)
	}
}
