package desktop

import (
	"errors"
	"log/slog"
	"net"

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
	// err says why there is no core.
	err error
}

// openBackend opens the user's service as `airlock serve` does (settings,
// state folder, guest image) and takes the control endpoint (a unix socket,
// a named pipe on Windows), or becomes a
// client of the service already answering on it.
func openBackend(log *slog.Logger) backend {
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
