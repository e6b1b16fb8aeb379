package desktop

import (
	"errors"
	"log/slog"
	"net"
	"os"

	"github.com/airlock-sandbox/airlock/app/api"
	"github.com/airlock-sandbox/airlock/app/service"
)

// backend is the core the window works on, and what the app owns of it.
type backend struct {
	core service.Core
	// svc is the in-process service, nil when another process (airlock
	// serve, another desktop build) already runs one: the window is then a
	// client of it and quitting leaves its VM alone.
	svc *service.Service
	// socket is the control API listener the app serves for the CLI and
	// MCP while it owns the service; nil without one.
	socket net.Listener
	// helper keeps the service the core talks to running, on systems
	// where it runs in the helper process (RunsHelper); nil elsewhere.
	helper *supervisor
	// err says why there is no core.
	err error
}

// openBackend opens the user's service as `airlock serve` does (settings,
// state folder, guest image) and takes the control endpoint (a unix socket,
// a named pipe on Windows), or becomes a
// client of the service already answering on it. Where the service runs in
// the helper process (macOS) the app is always its client (openHelper).
func openBackend(cfg Config) backend {
	log := cfg.Logger
	if RunsHelper(cfg.GOOS) {
		return openHelper(cfg)
	}
	sock, err := api.DefaultSocket()
	if err != nil {
		log.Warn("no control socket", "err", err)
	}
	var l net.Listener
	if sock != "" {
		l, err = api.Listen(sock)
		switch {
		case errors.Is(err, api.ErrRunning):
			log.Info("using the running service", "socket", sock)
			return backend{core: api.NewClient(sock)}
		case err != nil:
			log.Warn("control socket unavailable: the CLI will not see this app's VM", "err", err)
		}
	}
	svc, err := openService(log)
	if err != nil {
		if l != nil {
			l.Close()
		}
		return backend{err: err}
	}
	return backend{core: svc, svc: svc, socket: l}
}

func openService(log *slog.Logger) (*service.Service, error) {
	return service.OpenUser(nil, log)
}

// openHelper makes the app a client of the service on the control socket,
// with a supervisor that starts the helper (the airlock command in the
// app's bundle) when none answers; Startup starts it.
func openHelper(cfg Config) backend {
	sock, err := api.DefaultSocket()
	if err != nil {
		return backend{err: err}
	}
	client := api.NewClient(sock)
	var path string
	exe, err := os.Executable()
	if err == nil {
		path, err = FindHelper(exe, cfg.GOOS)
	}
	sup := newSupervisor(path, helperArgs(sock, os.Getpid(), cfg.NoBoot, cfg.Verbose), client.Ping, cfg.Logger)
	if err != nil {
		// A service started another way (airlock serve) is still used.
		cfg.Logger.Warn("no Airlock helper", "err", err)
		sup.missing = err
	}
	return backend{core: client, helper: sup}
}
