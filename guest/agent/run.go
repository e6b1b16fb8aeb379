//go:build linux

package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/guest/api"
	"github.com/airlock-sandbox/airlock/guest/egress"
	"github.com/airlock-sandbox/airlock/guest/transport"
)

// Where init puts things the agent uses.
const (
	CgroupTasks = "/sys/fs/cgroup/airlock/tasks"
	cgroupMount = "/sys/fs/cgroup"
)

// Signals init understands from the agent (see guest/boot).
const (
	SignalPowerOff = unix.SIGUSR2
	SignalReboot   = unix.SIGINT
)

// Options are what init gives the agent it runs (guest/boot).
type Options struct {
	// Hold, when set, is closed once init's setup is done (the loopback,
	// the workspace, the task cgroups): the agent opens its transport, then
	// waits for it before anything that needs that setup and before it
	// says it is ready.
	Hold <-chan struct{}
	// Reaper collects its tasks' exits (Config.Reaper).
	Reaper Reaper
	// Boot is the boot configuration init read from the kernel command
	// line (api.ParseCmdline).
	Boot api.BootConfig
	// Park, when set, parks the transport before its multiplexer starts
	// (transport.Options.Park) and gets the host's Wake: for the agent
	// init starts first on a guest booted with api.BootConfig.Park, never
	// for one it runs again.
	Park func(*api.Wake)
}

// Run is the guest agent; init runs it in PID 1 (guest/boot), with the boot
// configuration it read. It checks no_new_privs, opens the transport, starts the egress forwarders
// (guest/egress: 127.0.0.1:3128 and 127.0.0.1:1080 to the host's
// api.PortEgressHTTP and api.PortEgressSOCKS), serves the Agent service on
// api.PortAgent (ServeAgent) and tasks on api.PortExec, and tells the host
// it is ready. It returns when ctx is done or the transport fails; init
// then runs it again.
//
// Started held (Options.Hold), it does all of that but the serving and
// the readiness message before it waits for init: the proxies' sockets
// bind (egress.Listen: IP_FREEBIND, as the loopback may not be up yet)
// beside the transport opening, and the readiness stream is dialled before
// the wait, leaving one write after it.
func Run(ctx context.Context, log *slog.Logger, opts Options) error {
	hold, boot := opts.Hold, opts.Boot
	if boot.Transport == "" {
		boot.Transport = api.TransportVsock
	}
	if err := RestrictPrivileges(); err != nil {
		return err
	}

	px := bindProxies()
	defer px.closeUnserved()

	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	tr, err := transport.Open(octx, boot.Transport, transport.Options{Park: opts.Park})
	cancel()
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	defer tr.Close()
	l, err := tr.Listen(api.PortAgent)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	el, err := tr.Listen(api.PortExec)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	defer el.Close()
	ll, err := tr.Listen(api.PortLayer)
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	defer ll.Close()

	cfg := Config{
		Transport: boot.Transport,
		UID:       boot.UID,
		GID:       boot.GID,
		PowerOff:  signalInit,
		Logger:    log,
		Reaper:    opts.Reaper,
		TaskInit:  "/proc/self/exe",
		Tasks:     &egress.Tasks{},
		// Nothing to guard in a read-only share, nor where the user
		// allowed tasks to change it. A share whose changes the guest
		// holds is guarded as a writable one: what tasks change there
		// reaches the folder when the user applies it (or at once, in
		// the auto mode).
		GuardToolConfig: boot.Share != api.ShareNone && (!boot.ShareReadOnly || boot.Changes) && !boot.ToolConfigWritable,
	}
	// Held changes are reviewed on the host, which never applies these
	// names by itself; in direct mode nothing is between a task and the
	// folder.
	cfg.RefuseToolNames = cfg.GuardToolConfig && !boot.Changes
	if boot.Changes {
		cfg.LayerUpper, cfg.LayerLower, cfg.RefreshLayer = api.LayerUpper, api.LowerDir, dropDentries
	}
	if _, err := os.Stat(cgroupMount + "/cgroup.controllers"); err == nil {
		cfg.CgroupRoot = CgroupTasks
	} else {
		log.Warn("no cgroup2: tasks are killed by process group only")
	}
	srv := New(cfg)

	var readyConn net.Conn
	if hold != nil {
		// A failed dial is retried by AnnounceReady below.
		readyConn, _ = dialReady(ctx, tr.DialHost)
	}
	// Egress before readiness, so the first task finds its proxies.
	ectx, ecancel := context.WithCancel(ctx)
	wait := px.serve(ectx, tr.DialHost, cfg.Tasks, log)
	defer wait()
	defer ecancel()

	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			if readyConn != nil {
				readyConn.Close()
			}
			return ctx.Err()
		}
		log.Debug("init done")
	}
	// After init mounted the workspace: the mark is on its top folder.
	srv.guardTopFiles()

	served := make(chan error, 1)
	go func() { served <- srv.ServeAgent(l) }()
	stopServing := context.AfterFunc(ctx, func() { l.Close() })
	defer stopServing()
	go srv.ServeExec(el)
	go srv.ServeLayer(ll)

	up := Uptime()
	srv.MarkReady(up)
	ready := api.Ready{AgentVersion: Version, BootMillis: up.Milliseconds(), AgentInstance: srv.Instance()}
	err = nil
	if readyConn != nil {
		// The host drops a readiness stream it waited on too long (its
		// bound on a hostile guest); then a new one is dialled.
		err = writeReady(readyConn, ready)
	}
	if readyConn == nil || err != nil {
		err = AnnounceReady(ctx, tr.DialHost, ready)
	}
	if err != nil {
		log.Error("readiness", "err", err) // the host may still dial us
	} else {
		log.Info("ready", "transport", boot.Transport, "boot_ms", up.Milliseconds())
	}

	select {
	case err = <-served:
	case <-tr.Done():
		err = errors.New("agent: transport closed")
		l.Close()
		<-served
	}
	srv.Wait()
	return err
}

// proxies are the egress proxies' sockets, bound in the background (see
// Run) until serve takes them.
type proxies struct {
	routes []egress.Route
	bound  chan struct{} // closed once ls and err are set
	ls     []net.Listener
	err    error
	served bool
}

func bindProxies() *proxies {
	p := &proxies{routes: egress.DefaultRoutes(), bound: make(chan struct{})}
	go func() {
		defer close(p.bound)
		p.ls, p.err = egress.Listen(p.routes)
	}()
	return p
}

// serve waits for the sockets and forwards what they accept to the host
// with dial, each task's connections in its share (tasks), until ctx is done; wait is as egress.Forwarder.Start's. Without
// proxies the guest is merely offline, so a failure to bind them is
// logged, not fatal.
func (p *proxies) serve(ctx context.Context, dial egress.DialFunc, tasks *egress.Tasks, log *slog.Logger) (wait func()) {
	<-p.bound
	if p.err != nil {
		log.Error("egress proxies not started; tasks have no network", "err", p.err)
		return func() {}
	}
	p.served = true
	fwd := egress.New(egress.Config{Dial: dial, Tasks: tasks, Logger: log.With("part", "egress")})
	return fwd.ServeAll(ctx, p.ls, p.routes)
}

// closeUnserved closes the sockets if serve never took them.
func (p *proxies) closeUnserved() {
	<-p.bound
	if p.served {
		return
	}
	for _, l := range p.ls {
		l.Close()
	}
}

// AnnounceReady dials api.PortReady on the host and writes r. The host may
// not listen yet at the first try, so a refused dial is retried briefly.
func AnnounceReady(ctx context.Context, dial func(context.Context, uint32) (net.Conn, error), r api.Ready) error {
	var err error
	for attempt := range 10 {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(attempt) * 100 * time.Millisecond):
			}
		}
		if err = announceOnce(ctx, dial, r); err == nil {
			return nil
		}
	}
	return fmt.Errorf("agent: announce readiness: %w", err)
}

func announceOnce(ctx context.Context, dial func(context.Context, uint32) (net.Conn, error), r api.Ready) error {
	c, err := dialReady(ctx, dial)
	if err != nil {
		return err
	}
	return writeReady(c, r)
}

// dialReady opens a stream to api.PortReady, within 2 s.
func dialReady(ctx context.Context, dial func(context.Context, uint32) (net.Conn, error)) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return dial(ctx, api.PortReady)
}

// writeReady writes r on c, within 2 s, and closes c.
func writeReady(c net.Conn, r api.Ready) error {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	return api.WriteReady(c, r)
}

// signalInit asks PID 1 to power off or reboot.
func signalInit(reboot bool) error {
	sig := SignalPowerOff
	if reboot {
		sig = SignalReboot
	}
	return unix.Kill(1, sig)
}
