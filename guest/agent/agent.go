//go:build linux

package agent

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"

	"github.com/airlock-sandbox/airlock/guest/api"
	agentv1 "github.com/airlock-sandbox/airlock/guest/api/agent/v1"
)

// Version is the agent version reported in Ready and Info.
var Version = "dev"

const (
	maxMsgSize = 4 << 20
	maxTasks   = 256
)

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
	Logger   *slog.Logger
}

// Server implements agentv1.AgentServer.
type Server struct {
	agentv1.UnimplementedAgentServer
	cfg     Config
	log     *slog.Logger
	cgroups *cgroups // nil without cgroup support
	tasks   atomic.Int64
	bootMS  atomic.Int64
	// wsMounted caches the workspace's presence for task defaults: init
	// mounts it before the agent starts, and reading the mount table costs
	// each task a millisecond under emulation.
	wsMounted func() bool
	// devNull is the stdin of tasks without one, opened once and shared.
	devNull func() (*os.File, error)
	wg      sync.WaitGroup // shutdown goroutine
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
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, log: cfg.Logger}
	s.wsMounted = sync.OnceValue(func() bool { return s.workspace().mounted })
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

// NewGRPCServer returns a grpc.Server serving s, with message size limits,
// lenient keepalive enforcement (the host may ping idle connections), and
// handlers that turn a panic into an Internal error instead of a crash.
func NewGRPCServer(s *Server) *grpc.Server {
	g := grpc.NewServer(
		grpc.MaxRecvMsgSize(maxMsgSize),
		grpc.MaxSendMsgSize(maxMsgSize),
		// See agentv1.StreamWindow: no window waits, no BDP pings.
		grpc.InitialWindowSize(agentv1.StreamWindow),
		grpc.InitialConnWindowSize(agentv1.ConnWindow),
		grpc.ReadBufferSize(agentv1.IOBufferSize),
		grpc.WriteBufferSize(agentv1.IOBufferSize),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             time.Second,
			PermitWithoutStream: true,
		}),
		grpc.ChainUnaryInterceptor(s.recoverUnary),
		grpc.ChainStreamInterceptor(s.recoverStream),
	)
	agentv1.RegisterAgentServer(g, s)
	return g
}

func (s *Server) recovered(method string, r any) error {
	s.log.Error("handler panic", "method", method, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
	return status.Errorf(codes.Internal, "agent: internal error in %s", method)
}

func (s *Server) recoverUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = s.recovered(info.FullMethod, r)
		}
	}()
	return h(ctx, req)
}

func (s *Server) recoverStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = s.recovered(info.FullMethod, r)
		}
	}()
	return h(srv, ss)
}

// MarkReady records the uptime at which the agent became ready (Info.boot_ms).
func (s *Server) MarkReady(uptime time.Duration) { s.bootMS.Store(uptime.Milliseconds()) }

// Wait waits for work the Server started outside any RPC (the power-off
// after a Shutdown reply), then removes the empty task cgroups kept for
// reuse. Call it once no more tasks start.
func (s *Server) Wait() {
	s.wg.Wait()
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
		AgentVersion: Version,
		UptimeMs:     Uptime().Milliseconds(),
		Cpus:         uint32(runtime.NumCPU()),
		Transport:    string(s.cfg.Transport),
		UserUid:      s.cfg.UID,
		BootMs:       s.bootMS.Load(),
	}
	var u unix.Utsname
	if err := unix.Uname(&u); err == nil {
		r.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	r.MemoryTotalBytes, r.MemoryAvailableBytes = s.memory()
	ws := s.workspace()
	r.WorkspaceFs, r.WorkspaceReadOnly = ws.fs, ws.readOnly
	return r, nil
}

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
		return nil, status.Error(codes.InvalidArgument, "settime: unix_nanos must be positive")
	}
	if err := s.cfg.SetClock(time.Unix(0, req.GetUnixNanos())); err != nil {
		return nil, status.Errorf(codes.Internal, "settime: %v", err)
	}
	return &agentv1.SetTimeResponse{}, nil
}

func setRealtime(t time.Time) error {
	ts := unix.NsecToTimespec(t.UnixNano())
	return unix.ClockSettime(unix.CLOCK_REALTIME, &ts)
}

// shutdownDelay lets the Shutdown reply leave before init starts tearing
// the guest down; the host treats the VM's exit as the real answer anyway.
const shutdownDelay = 100 * time.Millisecond

// Shutdown syncs file systems, replies, then asks init to power off.
func (s *Server) Shutdown(_ context.Context, req *agentv1.ShutdownRequest) (*agentv1.ShutdownResponse, error) {
	if s.cfg.PowerOff == nil {
		return nil, status.Error(codes.Unimplemented, "shutdown: this agent cannot power the guest off")
	}
	unix.Sync()
	reboot := req.GetReboot()
	s.log.Info("shutdown requested", "reboot", reboot)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		time.Sleep(shutdownDelay)
		if err := s.cfg.PowerOff(reboot); err != nil {
			s.log.Error("power off", "err", err)
		}
	}()
	return &agentv1.ShutdownResponse{}, nil
}

// Serve serves gs on l until ctx is done or l fails.
func Serve(ctx context.Context, gs *grpc.Server, l net.Listener) error {
	stop := context.AfterFunc(ctx, gs.Stop)
	defer stop()
	err := gs.Serve(l)
	if ctx.Err() != nil {
		return nil
	}
	return err
}
