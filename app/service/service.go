// Package service is Airlock's host core: one warm session for the chosen
// workspace, the tasks run in it with durable logs, the egress gate, and the
// settings, composed behind one API (Core). Every front door — the control
// API, the CLI, the MCP server, the desktop bindings — is a thin adapter
// over it.
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/app/changes"
	"github.com/airlock-sandbox/airlock/app/egress"
	"github.com/airlock-sandbox/airlock/app/egress/intercept"
	"github.com/airlock-sandbox/airlock/app/egress/policy"
	"github.com/airlock-sandbox/airlock/app/sandbox"
	"github.com/airlock-sandbox/airlock/app/secrets"
	"github.com/airlock-sandbox/airlock/app/session"
	"github.com/airlock-sandbox/airlock/app/settings"
	"github.com/airlock-sandbox/airlock/app/tasks"
)

// Config configures a Service.
type Config struct {
	// StateDir holds the task history (tasks/), the egress log
	// (egress.jsonl) and the VM's runtime files (run/). Created 0700.
	StateDir string
	// SettingsPath is the settings file (settings.DefaultPath() in the app).
	SettingsPath string
	// Image is the verified minimal guest image.
	Image sandbox.Image
	// FindImage finds another image by name (the standard one) when the
	// settings or SetImage choose it; nil offers only Image.
	FindImage func(name string) (sandbox.Image, error)
	// Tasks bounds the task history.
	Tasks tasks.Options
	// CancelGrace is how long Cancel waits after SIGTERM before the task's
	// tree is killed; zero means 5 s.
	CancelGrace time.Duration
	// Start and Resolve replace the session's defaults (tests use fakes).
	Start   session.StartFunc
	Resolve session.ResolveFunc
	// BootTimeout bounds one boot; zero means the sandbox default.
	BootTimeout time.Duration
	Logger      *slog.Logger
	// Version is Airlock's version, reported by Status.
	Version string
	// Keychain keeps secret values; nil means none (values given directly
	// are then kept in memory only). OpenUser passes the OS keychain.
	Keychain secrets.Keychain
	// Getenv reads env: secret sources; nil means os.Getenv.
	Getenv func(string) string
}

// Service is the host core. Its methods are safe for concurrent use.
type Service struct {
	cfg   Config
	log   *slog.Logger
	sess  *session.Session
	store *tasks.Store
	gate  *egress.Gate
	valid settings.Validators
	// limits bound the machine sizes SetMachine accepts.
	limits MachineLimits
	ca     *intercept.CA
	vault  *secrets.Store

	asks  asks
	quota quotaWatch
	chg   held

	mu       sync.Mutex
	settings settings.Settings
	running  map[string]*runningTask
	closed   bool
	wg       sync.WaitGroup
}

var _ Core = (*Service)(nil)

// Open loads the settings (a bad file is an error naming the field), opens
// the task history (tasks left running by an earlier process are marked
// lost) and the egress gate, and prepares the session. The VM is not booted
// until StartVM or the first task.
func Open(cfg Config) (*Service, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.CancelGrace <= 0 {
		cfg.CancelGrace = 5 * time.Second
	}
	if cfg.Resolve == nil {
		cfg.Resolve = session.ResolveLocal
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("service: state folder: %w", err)
	}
	s := &Service{cfg: cfg, log: cfg.Logger, running: map[string]*runningTask{}, limits: machineLimits()}
	s.valid = settings.Validators{
		Workspace: func(dir string) (string, error) {
			f, err := cfg.Resolve(dir)
			return f.Path, err
		},
		Allow:         func(e string) error { _, err := policy.ParseAllowEntry(e); return err },
		Deny:          func(e string) error { _, err := policy.ParseEntry(e); return err },
		MapHost:       func(e string) error { _, err := policy.ParseMapHost(e); return err },
		Secret:        secrets.Validate,
		UpstreamProxy: func(u string) error { _, err := egress.ParseUpstreamProxy(u); return err },
	}
	st, err := settings.Load(cfg.SettingsPath, s.valid)
	if err != nil {
		return nil, err
	}
	s.settings = st
	if cfg.Tasks.MaxTaskBytes == 0 {
		cfg.Tasks.MaxTaskBytes = int64(st.TaskLogMaxMiB) << 20
	}
	if s.store, err = tasks.Open(filepath.Join(cfg.StateDir, "tasks"), cfg.Tasks); err != nil {
		return nil, fmt.Errorf("service: %w", err)
	}
	if s.ca, err = intercept.LoadCA(filepath.Join(cfg.StateDir, "ca")); err != nil {
		s.store.Close()
		return nil, fmt.Errorf("service: %w", err)
	}
	roots, err := intercept.UpstreamRoots(st.UpstreamCAs)
	if err != nil {
		s.store.Close()
		return nil, fmt.Errorf("service: settings upstream_cas: %w", err)
	}
	s.vault = secrets.NewStore(cfg.Keychain, cfg.Getenv)
	values, verr := s.vault.ForGate(st.Secrets)
	if verr != nil {
		s.log.Warn("some secrets are not available; a task given one is refused until it is set again", "err", verr)
	}
	s.gate, err = egress.New(egress.Config{
		Allow: st.Allow, Deny: st.Deny, MapHosts: st.MapHosts,
		LogFile: filepath.Join(cfg.StateDir, "egress.jsonl"), LogMaxBytes: int64(st.EgressLogMaxMiB) << 20, Logger: cfg.Logger,
		Decider: askDecider{s}, AskTimeout: AskTimeout, Service: true,
		CA: s.ca, Secrets: values, Inspect: st.Inspect, UpstreamRoots: roots, UpstreamProxy: st.UpstreamProxy,
	})
	if err != nil {
		s.store.Close()
		return nil, fmt.Errorf("service: %w", err)
	}
	opts := sandbox.Options{
		ReadOnly: st.ReadOnly, CPUs: st.CPUs, MemoryMiB: st.MemoryMiB, ToolConfigWritable: st.ToolConfigWritable,
		Egress: s.gate, BootTimeout: cfg.BootTimeout, Logger: cfg.Logger, GuestCA: s.ca.CertPEM(),
		// The warm VM lives on between tasks: what a big one used goes
		// back to the host once it is freed, and its first task starts as
		// fast as the next ones.
		ReclaimMemory: true, WarmUp: true,
	}
	opts.Image, opts.DiskDir = s.startImage(st)
	if st.Workspace != "" {
		f, err := cfg.Resolve(st.Workspace)
		if err != nil {
			s.gate.Close()
			s.store.Close()
			return nil, fmt.Errorf("service: workspace from settings: %w", err)
		}
		opts.Workspace, opts.UID, opts.GID = f.Path, f.UID, f.GID
	}
	start := cfg.Start
	if start == nil {
		start = session.StartSandbox
	}
	s.sess = session.New(session.Config{
		Sandbox: opts, RunDir: filepath.Join(cfg.StateDir, "run"), Start: s.startHeld(start),
		Resolve: cfg.Resolve, Logger: cfg.Logger, OnLost: s.onLost,
	})
	s.startQuota()
	return s, nil
}

// Close cancels running tasks, stops the VM (nothing is left running) and
// closes the history and the gate.
func (s *Service) Close(ctx context.Context) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	for _, r := range s.running {
		r.cancel()
	}
	s.mu.Unlock()
	s.quota.stop()
	err := s.sess.Close(ctx)
	s.wg.Wait()
	return errors.Join(err, s.closeHeld(), s.gate.Close(), s.store.Close())
}

// Status reports the session, the settings and the task counts.
func (s *Service) Status(context.Context) (Status, error) {
	s.mu.Lock()
	st := s.settings
	running := len(s.running)
	s.mu.Unlock()
	return Status{Session: s.sess.Status(), Settings: st, Limits: s.limits, RunningTasks: running, StateDir: s.cfg.StateDir,
		CacheDir: CacheDir(), SettingsPath: s.cfg.SettingsPath, Version: s.cfg.Version}, nil
}

// Settings returns the current settings.
func (s *Service) Settings(context.Context) (settings.Settings, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.settings, nil
}

// StartVM boots the VM (if it is not running) and waits until it is ready.
func (s *Service) StartVM(ctx context.Context) error { return s.sess.Start(ctx) }

// StopVM shuts the VM down in order; tasks still running on it are lost.
func (s *Service) StopVM(ctx context.Context) error { return s.sess.Stop(ctx) }

// RestartVM replaces the VM with a fresh one.
func (s *Service) RestartVM(ctx context.Context) error { return s.sess.Restart(ctx) }

// SetWorkspace validates dir, saves it in the settings with its changes
// mode (mode "" keeps the folder's: auto for a new one), and restarts the
// session on it. A refused folder or mode changes nothing; so does a
// folder whose held changes another process has open.
func (s *Service) SetWorkspace(ctx context.Context, dir string, readOnly bool, mode changes.Mode) error {
	if err := checkMode(mode); err != nil {
		return err
	}
	f, err := s.cfg.Resolve(dir)
	if err != nil {
		return err
	}
	s.mu.Lock()
	if mode == "" {
		mode = s.settings.ChangesMode(f.Path)
	}
	s.mu.Unlock()
	if Holds(f.Path, mode, readOnly) {
		// Take the folder's store now: another process holding it is
		// refused before anything changes.
		s.chg.mu.Lock()
		_, err := s.heldFor(f.Path, mode)
		s.chg.mu.Unlock()
		if err != nil {
			return err
		}
	}
	if err := s.updateSettings(func(st *settings.Settings) error {
		st.Workspace, st.ReadOnly = f.Path, readOnly
		*st = st.WithChangesMode(f.Path, mode)
		return nil
	}); err != nil {
		return err
	}
	return s.sess.SetWorkspace(ctx, f.Path, readOnly)
}

// EgressRule changes the allow and deny lists: action is "allow", "deny"
// or "remove" (from both). The gate applies it at once and the settings
// keep it.
func (s *Service) EgressRule(_ context.Context, action, pattern string) (settings.Settings, error) {
	err := s.updateSettings(func(st *settings.Settings) error {
		switch action {
		case "allow":
			if _, err := policy.ParseAllowEntry(pattern); err != nil {
				return err
			}
			st.Allow = appendNew(st.Allow, pattern)
		case "deny":
			if _, err := policy.ParseEntry(pattern); err != nil {
				return err
			}
			st.Deny = appendNew(st.Deny, pattern)
		case "remove":
			n := len(st.Allow) + len(st.Deny)
			st.Allow = slices.DeleteFunc(st.Allow, func(e string) bool { return e == pattern })
			st.Deny = slices.DeleteFunc(st.Deny, func(e string) bool { return e == pattern })
			if len(st.Allow)+len(st.Deny) == n {
				return fmt.Errorf("%q is in neither the allow nor the deny list", pattern)
			}
		default:
			return fmt.Errorf("unknown egress action %q: use allow, deny or remove", action)
		}
		return s.gate.SetPolicy(st.Allow, st.Deny, st.MapHosts)
	})
	if err != nil {
		return settings.Settings{}, err
	}
	return s.Settings(context.Background())
}

func appendNew(list []string, e string) []string {
	if slices.Contains(list, e) {
		return list
	}
	return append(list, e)
}

// updateSettings applies change to a copy of the settings, validates and
// saves it atomically, and only then makes it current.
func (s *Service) updateSettings(change func(*settings.Settings) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.settings
	st.Allow, st.Deny, st.MapHosts = slices.Clone(st.Allow), slices.Clone(st.Deny), slices.Clone(st.MapHosts)
	st.Secrets = slices.Clone(st.Secrets)
	if err := change(&st); err != nil {
		return err
	}
	if err := settings.Save(s.cfg.SettingsPath, st, s.valid); err != nil {
		return err
	}
	s.settings = st
	return nil
}

// EgressLog returns the gate's recent decisions, oldest first.
func (s *Service) EgressLog(context.Context) ([]egress.Decision, error) { return s.gate.Recent(), nil }

// FollowEgress streams decisions as they are made until ctx is done.
func (s *Service) FollowEgress(ctx context.Context) (<-chan egress.Decision, error) {
	return s.gate.Subscribe(ctx), nil
}
