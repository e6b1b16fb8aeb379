//go:build linux

package agent

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/guest/api"
	agentv1 "github.com/airlock-sandbox/airlock/guest/api/agent/v1"
	"github.com/airlock-sandbox/airlock/guest/api/execwire"
	"github.com/airlock-sandbox/airlock/guest/egress"
)

// Version is the agent version reported in Ready and Info.
var Version = "dev"

const maxTasks = 256

// Config is what the agent needs to know about the guest. Zero fields take
// the guest's defaults; tests point the paths at temporary directories.
type Config struct {
	Transport api.Transport
	// UID and GID run every task not asking for root.
	UID, GID uint32
	UserName string // api.UserName
	UserHome string // api.UserHome
	// WorkspaceDir is the shared folder's mount point (api.WorkspaceDir).
	WorkspaceDir string
	// GuardToolConfig makes the configuration in the workspace that the
	// user's tools run on the host read-only to tasks (toolconfig.go).
	GuardToolConfig bool
	// RefuseToolNames keeps tasks from making the names of that
	// configuration (.git, .envrc, .vscode, .idea) at the workspace's
	// top where there were none (rename.go): for a workspace whose
	// changes reach the folder at once, not held for review.
	RefuseToolNames bool
	// CgroupRoot holds one cgroup per task; empty disables per-task cgroups
	// (tasks are then killed by process group only).
	CgroupRoot string
	// ProcDir is procfs ("/proc"), read for mounts and memory.
	ProcDir string
	// PowerOff asks init to power off (or reboot). Called after the
	// Shutdown reply is sent.
	PowerOff func(reboot bool) error
	// SetClock sets the wall clock (clock_settime(CLOCK_REALTIME)).
	SetClock func(time.Time) error
	// CAFile and CABundle are where TrustCA writes the installation CA and
	// the system bundle it appends it to (api.CAFile, api.CABundle).
	CAFile, CABundle string
	Logger           *slog.Logger
	// Tasks, when set, is told each task's proxy credential while the
	// task runs: the egress forwarder's per-task shares (egress.Tasks).
	Tasks *egress.Tasks
	// TaskInit, when set, is the guest binary (/proc/self/exe) started with
	// TaskInitArg as the init of each task not run as root, in PID and
	// mount namespaces of its own; empty runs tasks directly in the
	// agent's namespaces (tests, and agents not run by the guest's init).
	TaskInit string
	// LayerUpper and LayerLower, for a guest booted with its changes held
	// (api.BootConfig.Changes), are the overlay's upper folder and the
	// read-only share beneath it, which the layer calls read and change
	// (layer.go); RefreshLayer makes the overlay at WorkspaceDir show a
	// change made to its upper folder beneath it (a forget).
	LayerUpper, LayerLower string
	RefreshLayer           func() error
	// Reaper, when set, collects the exit of every task's main process:
	// the agent runs in PID 1 (guest/boot), which must also reap what
	// tasks orphan, and one wait4(-1) loop does both. Nil: each task is
	// waited for with os.Process.Wait (tests, or a process that is not
	// PID 1).
	Reaper Reaper
}

// Reaper starts children and reports their exit, for an agent that runs in
// the guest's PID 1, where one loop reaps every child.
type Reaper interface {
	// Spawn calls start, which forks one child and returns its pid, so
	// that the child cannot be reaped before it is known; the channel gets
	// its wait status once it has exited.
	Spawn(start func() (pid int, err error)) (<-chan syscall.WaitStatus, error)
}

// Server is the agent: it answers the agent calls (execwire.Agent) and
// runs tasks.
type Server struct {
	cfg     Config
	log     *slog.Logger
	cgroups *cgroups // nil without cgroup support
	spares  spares   // the spare task init (Config.TaskInit)
	tasks   atomic.Int64
	// layerStale says a forget ran while tasks ran (layer.go): the
	// overlay entries they held show the forgotten layer until the
	// last task ends, and then are dropped (taskDone).
	layerStale atomic.Bool
	bootMS     atomic.Int64
	// instance tells this agent from the ones init ran before it on the
	// same VM (Info.agent_instance). The runtime's generator is seeded by
	// the kernel at exec, so drawing it never waits for entropy at boot.
	instance uint64
	// wsMounted caches the workspace's presence for task defaults: init
	// mounts it before the agent starts, and reading the mount table costs
	// each task a millisecond under emulation.
	wsMounted func() bool
	// rules restrict every task (restrict.go); built at the first.
	rules   func() (taskRules, error)
	toolMu  sync.Mutex // guardToolConfig, and:
	toolErr string     // its last failure logged
	// devNull is the stdin of tasks without one, opened once and shared.
	devNull func() (*os.File, error)
	wg      sync.WaitGroup // shutdown goroutine
	// shutdownSent is closed once a Shutdown answer has been written
	// (Replied): the power-off waits for it.
	shutdownSent     chan struct{}
	shutdownSentOnce sync.Once
}

// New returns a Server for cfg.
func New(cfg Config) *Server {
	if cfg.UserName == "" {
		cfg.UserName = api.UserName
	}
	if cfg.UserHome == "" {
		cfg.UserHome = api.UserHome
	}
	if cfg.WorkspaceDir == "" {
		cfg.WorkspaceDir = api.WorkspaceDir
	}
	if cfg.ProcDir == "" {
		cfg.ProcDir = "/proc"
	}
	if cfg.UID == 0 {
		cfg.UID = api.DefaultUID
	}
	if cfg.GID == 0 {
		cfg.GID = api.DefaultGID
	}
	if cfg.SetClock == nil {
		cfg.SetClock = setRealtime
	}
	if cfg.CAFile == "" {
		cfg.CAFile = api.CAFile
	}
	if cfg.CABundle == "" {
		cfg.CABundle = api.CABundle
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, log: cfg.Logger, instance: rand.Uint64() | 1, shutdownSent: make(chan struct{})}
	s.spares.changed.L = &s.spares.mu
	s.wsMounted = sync.OnceValue(func() bool { return s.workspace().mounted })
	s.rules = sync.OnceValues(s.buildRules)
	s.devNull = sync.OnceValues(func() (*os.File, error) {
		// Blocking and outside the netpoller, as a child's stdin should be.
		fd, err := unix.Open(os.DevNull, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, os.NewSyscallError("open "+os.DevNull, err)
		}
		return os.NewFile(uintptr(fd), os.DevNull), nil
	})
	if cfg.CgroupRoot != "" {
		s.cgroups = &cgroups{root: cfg.CgroupRoot}
	}
	return s
}

// ServeAgent answers the agent calls whose streams arrive on l
// (api.PortAgent) until l is closed. A panic in a call is logged and
// answered with Internal, and does not end the agent.
func (s *Server) ServeAgent(l net.Listener) error {
	return execwire.ServeAgent(l, s, func(call string, r any) { s.recovered(call, r) })
}

func (s *Server) recovered(method string, r any) error {
	s.log.Error("handler panic", "method", method, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
	return agentv1.Errorf(agentv1.Code_INTERNAL, "agent: internal error in %s", method)
}

// Instance is this agent's Info.agent_instance (a new one each run).
func (s *Server) Instance() uint64 { return s.instance }

// MarkReady records the uptime at which the agent became ready (Info.boot_ms).
func (s *Server) MarkReady(uptime time.Duration) { s.bootMS.Store(uptime.Milliseconds()) }

// Wait waits for work the Server started outside any RPC (the power-off
// after a Shutdown reply), then removes the empty task cgroups kept for
// reuse. Call it once no more tasks start.
func (s *Server) Wait() {
	s.wg.Wait()
	s.stopSpares()
	if s.cgroups != nil {
		s.cgroups.drain()
	}
}

// Uptime is the time since the kernel started (CLOCK_BOOTTIME).
func Uptime() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// Info reports the guest's state.
func (s *Server) Info(context.Context, *agentv1.InfoRequest) (*agentv1.InfoResponse, error) {
	r := &agentv1.InfoResponse{
		AgentVersion:  Version,
		UptimeMs:      Uptime().Milliseconds(),
		Cpus:          uint32(runtime.NumCPU()),
		Transport:     string(s.cfg.Transport),
		UserUid:       s.cfg.UID,
		BootMs:        s.bootMS.Load(),
		AgentInstance: s.instance,
	}
	r.Kernel = kernelRelease()
	r.MemoryTotalBytes, r.MemoryAvailableBytes = s.memory()
	ws := s.workspace()
	r.WorkspaceFs, r.WorkspaceReadOnly = ws.fs, ws.readOnly
	return r, nil
}

// kernelRelease is the running kernel's release, asked once: it cannot
// change, and every health check asks for it.
var kernelRelease = sync.OnceValue(func() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Release[:])
})

func (s *Server) memory() (total, avail uint64) {
	f, err := os.Open(filepath.Join(s.cfg.ProcDir, "meminfo"))
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, 64<<10))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			continue
		}
		if len(f) > 1 && f[1] == "kB" {
			n *= 1024
		}
		switch k {
		case "MemTotal":
			total = n
		case "MemAvailable":
			avail = n
		}
	}
	return total, avail
}

type workspaceMount struct {
	mounted  bool
	fs       string
	readOnly bool
}

// workspace finds the workspace mount in /proc/self/mounts (the last entry
// for the mount point wins, as it is the one on top).
func (s *Server) workspace() workspaceMount {
	b, err := os.ReadFile(filepath.Join(s.cfg.ProcDir, "self", "mounts"))
	if err != nil {
		return workspaceMount{}
	}
	return parseMounts(b, s.cfg.WorkspaceDir)
}

// workspaceMounted reports whether the workspace was mounted when the
// first task asked.
func (s *Server) workspaceMounted() bool { return s.wsMounted() }

func parseMounts(b []byte, dir string) workspaceMount {
	var m workspaceMount
	for _, line := range bytes.Split(b, []byte("\n")) {
		f := strings.Fields(string(line))
		if len(f) < 4 || f[1] != dir {
			continue
		}
		m = workspaceMount{mounted: true, fs: f[2]}
		for _, o := range strings.Split(f[3], ",") {
			if o == "ro" {
				m.readOnly = true
			}
		}
	}
	return m
}

// SetTime sets the wall clock.
func (s *Server) SetTime(_ context.Context, req *agentv1.SetTimeRequest) (*agentv1.SetTimeResponse, error) {
	if req.GetUnixNanos() <= 0 {
		return nil, agentv1.Errorf(agentv1.Code_INVALID_ARGUMENT, "settime: unix_nanos must be positive")
	}
	if err := s.cfg.SetClock(time.Unix(0, req.GetUnixNanos())); err != nil {
		return nil, agentv1.Errorf(agentv1.Code_INTERNAL, "settime: %v", err)
	}
	return &agentv1.SetTimeResponse{}, nil
}

// maxCAPEM bounds a TrustCA certificate: the installation CA's PEM is
// about 1 KiB.
const maxCAPEM = 64 << 10

// TrustCA makes the guest trust the host's installation CA: the PEM
// replaces CAFile and is appended to CABundle, each created with its
// folder when missing (a root disk's image may lack them). Done here rather
// than by a root task's shell script, whose processes would each cost every
// boot a start under emulation (docs/performance.md, Figures behind the code).
func (s *Server) TrustCA(_ context.Context, req *agentv1.TrustCARequest) (*agentv1.TrustCAResponse, error) {
	pem := req.GetPem()
	if len(pem) > maxCAPEM {
		return nil, agentv1.Errorf(agentv1.Code_INVALID_ARGUMENT, "trust_ca: certificate of %d bytes, at most %d", len(pem), maxCAPEM)
	}
	if !bytes.Contains(pem, []byte("-----BEGIN CERTIFICATE-----")) {
		return nil, agentv1.Errorf(agentv1.Code_INVALID_ARGUMENT, "trust_ca: not a PEM certificate")
	}
	if pem[len(pem)-1] != '\n' {
		pem = append(pem[:len(pem):len(pem)], '\n')
	}
	if err := writeFileAtomic(s.cfg.CAFile, pem); err != nil {
		return nil, agentv1.Errorf(agentv1.Code_INTERNAL, "trust_ca: %v", err)
	}
	if err := appendLines(s.cfg.CABundle, pem); err != nil {
		return nil, agentv1.Errorf(agentv1.Code_INTERNAL, "trust_ca: %v", err)
	}
	return &agentv1.TrustCAResponse{}, nil
}

// writeFileAtomic replaces p with b (mode 0644), making its folder: a
// reader sees the old file or the new one, never part of it.
func writeFileAtomic(p string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), p)
}

// appendLines appends b to the file p (made, mode 0644, with its folder,
// when missing), starting on a line of its own.
func appendLines(p string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(p, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	if fi, err := f.Stat(); err == nil && fi.Size() > 0 {
		last := make([]byte, 1)
		if _, err := f.ReadAt(last, fi.Size()-1); err == nil && last[0] != '\n' {
			b = append([]byte{'\n'}, b...)
		}
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func setRealtime(t time.Time) error {
	ts := unix.NsecToTimespec(t.UnixNano())
	return unix.ClockSettime(unix.CLOCK_REALTIME, &ts)
}

// shutdownDelay bounds how long the power-off waits for the Shutdown
// answer to be written (Replied): an answer that cannot be written (the
// host went) does not keep the guest up. The host waits for the VM's exit
// once it has the answer; without one it stops the machine itself.
var shutdownDelay = 100 * time.Millisecond

// Shutdown syncs file systems, replies, then, once the reply is written,
// asks init to power off: every `airlock run` and VM replacement waits for
// the power-off.
func (s *Server) Shutdown(_ context.Context, req *agentv1.ShutdownRequest) (*agentv1.ShutdownResponse, error) {
	if s.cfg.PowerOff == nil {
		return nil, agentv1.Errorf(agentv1.Code_UNIMPLEMENTED, "shutdown: this agent cannot power the guest off")
	}
	unix.Sync()
	reboot := req.GetReboot()
	s.log.Info("shutdown requested", "reboot", reboot)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTimer(shutdownDelay)
		defer t.Stop()
		select {
		case <-s.shutdownSent:
		case <-t.C:
		}
		if err := s.cfg.PowerOff(reboot); err != nil {
			s.log.Error("power off", "err", err)
		}
	}()
	return &agentv1.ShutdownResponse{}, nil
}

// Replied implements execwire.Replied: a Shutdown answer written lets the
// power-off go ahead.
func (s *Server) Replied(req *agentv1.AgentRequest) {
	if req.GetShutdown() != nil {
		s.shutdownSentOnce.Do(func() { close(s.shutdownSent) })
	}
}
