package service

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/app/egress"
	"github.com/airlock-sandbox/airlock/app/session"
	"github.com/airlock-sandbox/airlock/app/tasks"
	agentv1 "github.com/airlock-sandbox/airlock/guest/api/agent/v1"
	"github.com/airlock-sandbox/airlock/guest/api/execwire"
	"github.com/airlock-sandbox/airlock/guest/client"
)

// ErrClosed is returned once the service is closed.
var ErrClosed = errors.New("service: closed")

// runningTask is a task this process is running.
type runningTask struct {
	cancel     context.CancelFunc
	signal     chan int
	generation int
	started    bool // the guest started the process: from then on a dead VM means lost
	cancelled  bool
	done       chan struct{}
	term       *terminal // an interactive task's terminal, else nil
}

// Run creates a task and runs it in the background (booting the VM when
// needed); it returns the queued task at once. Its output goes to the task
// log as it arrives.
func (s *Service) Run(_ context.Context, req RunRequest) (tasks.Task, error) {
	if len(req.Stdin) > MaxStdin {
		return tasks.Task{}, fmt.Errorf("stdin of %d bytes is over the %d byte limit", len(req.Stdin), MaxStdin)
	}
	for _, kv := range req.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return tasks.Task{}, fmt.Errorf("env %q: expected KEY=VALUE", kv)
		}
	}
	if reason := s.quota.reason(); reason != "" {
		// Measure again: the user may have freed space since the last walk.
		if reason = s.checkQuota(context.Background(), true); reason != "" {
			return tasks.Task{}, fmt.Errorf("%w: %s", ErrOverQuota, reason)
		}
	}
	// The values are read outside the lock: a keychain may be slow.
	s.mu.Lock()
	list := slices.Clone(s.settings.Secrets)
	s.mu.Unlock()
	secretEnv, err := s.vault.Env(list, req.Secrets)
	if err != nil {
		return tasks.Task{}, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return tasks.Task{}, ErrClosed
	}
	t, err := s.store.Create(tasks.Command{
		Argv: req.Argv, Shell: req.Shell, Env: req.Env, Cwd: req.Cwd, Root: req.Root, Timeout: req.Timeout,
	})
	if err != nil {
		s.mu.Unlock()
		return tasks.Task{}, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &runningTask{cancel: cancel, signal: make(chan int, 2), done: make(chan struct{})}
	s.running[t.ID] = r
	s.wg.Add(1)
	s.mu.Unlock()
	s.taskBegins()
	go func() {
		defer s.wg.Done()
		defer close(r.done)
		defer cancel()
		s.execute(ctx, t.ID, req, secretEnv, r)
		s.mu.Lock()
		delete(s.running, t.ID)
		s.mu.Unlock()
	}()
	return t, nil
}

// execute runs one task to its end and records how it ended. A task whose
// VM dies before the guest started it is run on the next VM instead: it was
// never running, so nothing is lost.
//
// What the task changed in a held workspace is pulled from the VM (and in
// auto mode applied) before the task is reported finished.
func (s *Service) execute(ctx context.Context, id string, req RunRequest, secretEnv []string, r *runningTask) {
	var agent *client.Client // the VM the task ran on
	ended := false
	finish := func(state tasks.State, exit tasks.Exit, reason string) {
		ended = true
		if state == tasks.Lost {
			// The VM is gone or does not answer: its layer stays on its
			// disk and the next task's pull finds it.
			agent = nil
		}
		s.taskEnds(agent)
		s.finish(id, state, exit, reason)
	}
	defer func() {
		if !ended {
			s.taskEnds(nil)
		}
	}()
	// A task wants a VM: boot one when none is running or wanted (a failed
	// session is retried too, so the user's next task is its next chance).
	if st := s.sess.Status().State; st == session.StateStopped || st == session.StateFailed {
		if err := s.sess.Start(ctx); err != nil {
			finish(tasks.Lost, tasks.Exit{}, "no VM to run on: "+err.Error())
			return
		}
	}
	user, pass := s.gate.Credentials(id)
	defer s.gate.Revoke(id)
	spec := client.Spec{
		ID: id, Argv: req.Argv, Shell: req.Shell, Cwd: req.Cwd, Root: req.Root, Timeout: req.Timeout,
		Env: slices.Concat(egress.ProxyEnv(user, pass), egress.TrustEnv(), secretEnv, req.Env),
	}
	stdio := client.Stdio{
		Stdout: s.store.Stdout(id), Stderr: s.store.Stderr(id), Signal: r.signal,
		Started: func(int) { s.mu.Lock(); r.started = true; s.mu.Unlock() },
	}
	if r.term != nil {
		r.term.connect(&spec, &stdio)
	}
	lastGen, lastRestarts := 0, 0
	for attempt := 0; ; attempt++ {
		a, gen, err := s.agentAfter(ctx, lastGen, lastRestarts)
		if err != nil {
			finish(tasks.Lost, tasks.Exit{}, "no VM to run on: "+err.Error())
			return
		}
		agent = a
		s.mu.Lock()
		r.generation = gen
		s.mu.Unlock()
		if attempt == 0 {
			if _, err := s.store.Start(id); err != nil {
				s.log.Warn("task start", "task", id, "err", err)
				return
			}
		}
		if req.Stdin != nil {
			stdio.Stdin = bytes.NewReader(req.Stdin)
		}
		// The guest ends a task at its deadline; a guest that cannot (a frozen
		// VM, a hostile agent) must not hold the task running forever.
		ectx, ecancel := ctx, context.CancelFunc(func() {})
		if req.Timeout > 0 {
			ectx, ecancel = context.WithTimeout(ctx, req.Timeout+HostTimeoutGrace)
		}
		restarts := s.sess.Status().AgentRestarts
		exit, err := agent.Exec(ectx, spec, stdio)
		hostTimedOut := err != nil && ctx.Err() == nil && errors.Is(ectx.Err(), context.DeadlineExceeded)
		ecancel()
		s.mu.Lock()
		cancelled, started := r.cancelled, r.started
		s.mu.Unlock()
		if hostTimedOut && !cancelled {
			agent = nil // the guest does not answer: the next task's pull finds its layer
			finish(tasks.TimedOut, tasks.Exit{Signal: int(syscall.SIGKILL)}, fmt.Sprintf(
				"timed out after %s: the guest did not end the task within %s more, so the host stopped waiting (is the VM frozen? see `airlock status`)",
				req.Timeout, HostTimeoutGrace))
			return
		}
		if err != nil && !cancelled && !started && attempt < 2 && isTransport(err) {
			s.log.Info("the VM went away before the task started; running it on the next one", "task", id, "generation", gen)
			// Its agent may have been restarted in place: have the session
			// look now rather than at its next health check.
			s.sess.CheckAgent()
			lastGen, lastRestarts = gen, restarts
			continue
		}
		finish(Outcome(exit, err, cancelled, req.Timeout))
		return
	}
}

// HostTimeoutGrace is how long past a task's timeout the host waits for the
// guest to report the task ended before it gives up on the guest.
const HostTimeoutGrace = 15 * time.Second

// retryWait bounds how long a task that could not reach its VM's agent
// waits for the session to replace the VM, or to reconnect to a restarted
// agent on it; a VM the session still finds healthy by then gets the task
// again. A variable only so tests need not wait 30 s.
var retryWait = 30 * time.Second

// agentAfter returns the agent of a VM newer than generation after (0: any),
// or of the same VM once its agent restarted more than restarts times,
// waiting while the session notices a dead VM and boots the next, or
// reconnects to the agent init ran again, at most retryWait.
func (s *Service) agentAfter(ctx context.Context, after, restarts int) (*client.Client, int, error) {
	giveUp := time.Now().Add(retryWait)
	for {
		agent, gen, err := s.sess.Agent(ctx)
		if err != nil || gen != after || time.Now().After(giveUp) {
			return agent, gen, err
		}
		if s.sess.Status().AgentRestarts > restarts {
			return agent, gen, nil
		}
		select {
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// isTransport reports whether an Exec error means the connection to the
// agent broke, rather than the agent refusing the task.
func isTransport(err error) bool {
	return errors.Is(err, agentv1.ErrUnavailable) || errors.Is(err, client.ErrNoExit)
}

// Outcome maps how an Exec call ended to a task's final state, exit status
// and reason: the one table every front door shares (an ephemeral `run`
// too), so exit codes mean the same everywhere. A command that cannot be
// started ends as exited with a shell's code (127 not found, 126 not
// runnable, 125 refused); a broken transport means the task was lost.
func Outcome(exit client.Exit, err error, cancelled bool, timeout time.Duration) (tasks.State, tasks.Exit, string) {
	state, ex, reason := outcome(exit, err, cancelled, timeout)
	return state, ex, clipReason(reason)
}

// MaxReason bounds a task's reason: it may quote the guest, which is not
// trusted to be brief.
const MaxReason = 1024

func clipReason(s string) string {
	s = strings.ToValidUTF8(s, "?")
	if len(s) <= MaxReason {
		return s
	}
	cut := MaxReason
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("… (%d bytes cut)", len(s)-cut)
}

func outcome(exit client.Exit, err error, cancelled bool, timeout time.Duration) (tasks.State, tasks.Exit, string) {
	ex := tasks.Exit{Code: exit.Code, Signal: exit.Signal}
	switch {
	case err == nil && exit.TimedOut:
		return tasks.TimedOut, ex, fmt.Sprintf("timed out after %s", timeout)
	case err == nil && cancelled:
		return tasks.Killed, ex, "cancelled"
	case err == nil:
		return tasks.Exited, ex, ""
	case cancelled:
		return tasks.Killed, tasks.Exit{Signal: int(syscall.SIGKILL)}, "cancelled"
	}
	var guest *agentv1.Error
	errors.As(err, &guest)
	switch {
	case errors.Is(err, agentv1.ErrNotFound):
		return tasks.Exited, tasks.Exit{Code: 127}, guest.GetMessage()
	case errors.Is(err, agentv1.ErrPermissionDenied):
		return tasks.Exited, tasks.Exit{Code: 126}, guest.GetMessage()
	case errors.Is(err, agentv1.ErrInvalidArgument), errors.Is(err, agentv1.ErrFailedPrecondition), errors.Is(err, agentv1.ErrResourceExhausted):
		return tasks.Exited, tasks.Exit{Code: 125}, guest.GetMessage()
	}
	// How the task ended is not known: it is lost. Say whose fault that is.
	switch {
	case errors.Is(err, client.ErrNoExit), errors.Is(err, client.ErrBadExit), errors.Is(err, execwire.ErrFrame):
		return tasks.Lost, tasks.Exit{}, "the guest agent broke the protocol: " + err.Error()
	case errors.Is(err, agentv1.ErrUnavailable), errors.Is(err, agentv1.ErrCanceled), errors.Is(err, agentv1.ErrDeadlineExceeded):
		return tasks.Lost, tasks.Exit{}, "the VM or its agent stopped: " + err.Error()
	}
	return tasks.Lost, tasks.Exit{}, "the guest agent failed: " + err.Error()
}

func (s *Service) finish(id string, state tasks.State, exit tasks.Exit, reason string) {
	if _, err := s.store.Finish(id, state, exit, reason); err != nil && !errors.Is(err, tasks.ErrFinal) {
		s.log.Warn("task finish", "task", id, "state", state, "err", err)
	}
}

// onLost marks the tasks that ran on a VM that died as lost, at once: their
// Exec calls may take a moment to notice.
func (s *Service) onLost(generation int, err error) {
	s.mu.Lock()
	var ids []string
	for id, r := range s.running {
		// A task the guest had not started yet is retried on the next VM.
		if r.generation == generation && r.started {
			ids = append(ids, id)
		}
	}
	s.mu.Unlock()
	if len(ids) > 0 {
		s.store.MarkLost(fmt.Sprintf("the VM died: %v", err), ids...)
	}
}

// Cancel ends a running task: SIGTERM to its process group, then, after the
// grace period, its whole tree is killed.
func (s *Service) Cancel(_ context.Context, id string) error {
	s.mu.Lock()
	r, ok := s.running[id]
	if ok {
		r.cancelled = true
	}
	s.mu.Unlock()
	if !ok {
		if _, err := s.store.Get(id); err != nil {
			return err
		}
		return fmt.Errorf("task %s is not running", id)
	}
	select {
	case r.signal <- int(syscall.SIGTERM):
	default:
	}
	go func() {
		select {
		case <-r.done:
		case <-time.After(s.cfg.CancelGrace):
			r.cancel() // the guest kills the task's tree when its call is cancelled
		}
	}()
	return nil
}

// Task returns one task.
func (s *Service) Task(_ context.Context, id string) (tasks.Task, error) { return s.store.Get(id) }

// Tasks lists the task history, oldest first.
func (s *Service) Tasks(context.Context) ([]tasks.Task, error) { return s.store.List(), nil }

// Wait blocks until the task is final or ctx is done. It waits on the
// task itself, not on the store's event stream: a waiter is woken once,
// when its task ends, instead of at every change of every task (16 waiters
// of output-heavy tasks would each be woken by all 16 tasks' writes,
// through one lock).
func (s *Service) Wait(ctx context.Context, id string) (tasks.Task, error) {
	return s.store.Wait(ctx, id)
}

// Logs reads a task's output from offset (0 for the start).
func (s *Service) Logs(_ context.Context, id string, offset int64) ([]tasks.Chunk, int64, error) {
	return s.store.ReadFrom(id, offset)
}

// FollowLogs streams a task's output from offset until the task is final
// and all of it was sent, or ctx is done.
func (s *Service) FollowLogs(ctx context.Context, id string, offset int64) (<-chan tasks.Chunk, error) {
	return s.store.Follow(ctx, id, offset)
}
