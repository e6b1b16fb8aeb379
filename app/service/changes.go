package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/app/changes"
	"github.com/airlock-sandbox/airlock/app/sandbox"
	"github.com/airlock-sandbox/airlock/app/session"
	"github.com/airlock-sandbox/airlock/guest/client"
)

// ChangesList is what Changes returns: the workspace's mode, its pending
// changes and the space its store takes.
type ChangesList struct {
	Mode    changes.Mode    `json:"mode"`
	Entries []changes.Entry `json:"entries"`
	Usage   changes.Usage   `json:"usage"`
}

// CheckpointList is what Checkpoints returns: newest first.
type CheckpointList struct {
	Checkpoints []changes.Checkpoint `json:"checkpoints"`
	Usage       changes.Usage        `json:"usage"`
}

// ErrNoWorkspace means there is no workspace whose changes to show.
var ErrNoWorkspace = errors.New("no workspace is chosen: choose one first (airlock workspace set DIR)")

// held is the service's side of its workspace's held changes. mu orders
// the store's switch, pulls, applies, discards and undos, and the count
// of tasks under way.
type held struct {
	mu     sync.Mutex
	cur    *Held // the store of the workspace last used, nil before
	active int   // tasks between Run and their end

	subMu sync.Mutex
	subs  map[chan Event]struct{}
}

// heldFor returns the open store of workspace ws, switching from another
// one (closing it); mode is the workspace's mode now. h.mu is held.
func (s *Service) heldFor(ws string, mode changes.Mode) (*Held, error) {
	h := &s.chg
	if h.cur != nil && h.cur.Workspace == ws {
		h.cur.Mode = mode
		return h.cur, nil
	}
	next, err := OpenHeld(s.cfg.StateDir, ws, mode)
	if err != nil {
		return nil, err
	}
	next.Log = s.log
	if h.cur != nil {
		if err := h.cur.Close(); err != nil {
			s.log.Warn("close changes store", "workspace", h.cur.Workspace, "err", err)
		}
	}
	h.cur = next
	return next, nil
}

// current returns the store of the settings' workspace. h.mu is held.
func (s *Service) current() (*Held, error) {
	s.mu.Lock()
	ws, mode := s.settings.Workspace, s.settings.ChangesMode(s.settings.Workspace)
	s.mu.Unlock()
	if ws == "" {
		return nil, ErrNoWorkspace
	}
	return s.heldFor(ws, mode)
}

// startHeld wraps start: a workspace in review or auto boots held (its
// folder read-only under the guest's layer), and the guest forgets at
// once what was applied or discarded while no VM ran.
func (s *Service) startHeld(start session.StartFunc) session.StartFunc {
	return func(ctx context.Context, o sandbox.Options) (session.Sandbox, error) {
		s.mu.Lock()
		mode := s.settings.ChangesMode(o.Workspace)
		s.mu.Unlock()
		if !Holds(o.Workspace, mode, o.ReadOnly) {
			return start(ctx, o)
		}
		s.chg.mu.Lock()
		h, err := s.heldFor(o.Workspace, mode)
		if err == nil {
			err = h.BootOptions(&o)
		}

		s.chg.mu.Unlock()
		if err != nil {
			return nil, err
		}
		sb, err := start(ctx, o)
		if err != nil {
			return nil, err
		}
		// No task runs on the VM before this returns: a layer the guest
		// has forgotten everything of begins its epoch now.
		s.chg.mu.Lock()
		err = h.On(Guest{Agent: sb.Agent()}).AfterBoot(ctx)
		if err == nil {
			err = h.Fresh()
		}
		s.chg.mu.Unlock()
		if err != nil {
			cctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			_ = sb.Close(cctx)
			return nil, err
		}
		return sb, nil
	}
}

// taskBegins counts a task as under way (Auto waits for the last). The
// first task after none ran begins the layer's epoch anew when it holds
// nothing pending: the user's edits before it are no conflicts.
func (s *Service) taskBegins() {
	h := &s.chg
	h.mu.Lock()
	defer h.mu.Unlock()
	h.active++
	if h.active > 1 {
		return
	}
	s.mu.Lock()
	ws, ro := s.settings.Workspace, s.settings.ReadOnly
	mode := s.settings.ChangesMode(ws)
	s.mu.Unlock()
	if !Holds(ws, mode, ro) || h.cur == nil || h.cur.Workspace != ws {
		return // a boot makes its epoch
	}
	if err := h.cur.Fresh(); err != nil {
		s.log.Warn("changes: the layer's epoch", "err", err)
	}
}

// taskEnds pulls what the task left in the guest's layer (agent is the
// VM it ran on, nil when it never ran) into the pending changes and, in
// auto mode when it was the last task under way, applies them. It runs
// before the task is reported finished, so whoever waits for the task
// finds the folder as the task left it.
func (s *Service) taskEnds(agent *client.Client) {
	h := &s.chg
	h.mu.Lock()
	defer h.mu.Unlock()
	h.active--
	s.mu.Lock()
	ws, ro := s.settings.Workspace, s.settings.ReadOnly
	mode := s.settings.ChangesMode(ws)
	s.mu.Unlock()
	st := s.sess.Status()
	// The VM runs on the session's workspace: the settings' one may have
	// changed since it booted, and then this VM's layer is not that one's.
	if st.Workspace != ws || !Holds(ws, mode, ro) {
		return
	}
	cur, err := s.heldFor(ws, mode)
	if err != nil {
		s.log.Warn("changes: the store did not open", "workspace", ws, "err", err)
		return
	}
	ctx := context.Background()
	// A task that never ran leaves the VM, if any, out of reach here.
	vm := cur.On(Guest{Agent: agent, Busy: agent == nil})
	if agent != nil {
		sum, err := vm.Pull(ctx)
		if err != nil {
			s.log.Warn("changes: pull after the task", "err", err)
		} else if len(sum.Refused) > 0 {
			s.log.Warn("changes: the guest's layer holds changes that cannot reach the folder", "refused", len(sum.Refused))
		}
	}
	if mode == changes.Auto && h.active == 0 {
		res, err := vm.ApplyAuto(ctx)
		if err != nil {
			s.log.Warn("changes: auto apply", "err", err)
		} else if len(res.Applied) > 0 {
			s.log.Info("changes: applied", "checkpoint", res.Checkpoint, "paths", len(res.Applied), "waiting", len(res.Conflicts)+len(res.Refused))
		}
	}
	s.publishPending(cur)
}

// liveGuest returns the VM as a change call finds it: its agent once it
// runs (waiting for a boot under way), or none at all. Call it before
// h.mu is taken: a boot takes h.mu too.
func (s *Service) liveGuest(ctx context.Context) Guest {
	switch s.sess.Status().State {
	case session.StateStopped, session.StateFailed:
		return Guest{}
	}
	actx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	a, _, err := s.sess.Agent(actx)
	if err != nil {
		st := s.sess.Status().State
		return Guest{Busy: st != session.StateStopped && st != session.StateFailed}
	}
	return Guest{Agent: a}
}

// Changes lists the workspace's pending changes.
func (s *Service) Changes(ctx context.Context) (ChangesList, error) {
	s.chg.mu.Lock()
	defer s.chg.mu.Unlock()
	cur, err := s.current()
	if err != nil {
		return ChangesList{}, err
	}
	return cur.Changes(ctx)
}

// Diff writes a unified diff of the pending changes to paths (all when
// none) against the workspace's files.
func (s *Service) Diff(ctx context.Context, paths []string, w io.Writer) error {
	s.chg.mu.Lock()
	defer s.chg.mu.Unlock()
	cur, err := s.current()
	if err != nil {
		return err
	}
	return cur.Diff(ctx, paths, w)
}

// Content opens the new content of a pending file.
func (s *Service) Content(ctx context.Context, path string) (io.ReadCloser, changes.Entry, error) {
	s.chg.mu.Lock()
	defer s.chg.mu.Unlock()
	cur, err := s.current()
	if err != nil {
		return nil, changes.Entry{}, err
	}
	return cur.Content(ctx, path)
}

// Apply carries the pending changes to paths (all when none) into the
// workspace, as one checkpoint; force applies conflicts too.
func (s *Service) Apply(ctx context.Context, paths []string, force bool) (changes.ApplyResult, error) {
	g := s.liveGuest(ctx)
	s.chg.mu.Lock()
	defer s.chg.mu.Unlock()
	cur, err := s.current()
	if err != nil {
		return changes.ApplyResult{}, err
	}
	res, err := cur.On(g).Apply(ctx, paths, force)
	if err == nil {
		s.publishPending(cur)
	}
	return res, err
}

// Discard drops the pending changes to paths (all when none).
func (s *Service) Discard(ctx context.Context, paths []string) ([]string, error) {
	g := s.liveGuest(ctx)
	s.chg.mu.Lock()
	defer s.chg.mu.Unlock()
	cur, err := s.current()
	if err != nil {
		return nil, err
	}
	done, err := cur.On(g).Discard(ctx, paths)
	if err == nil {
		s.publishPending(cur)
	}
	return done, err
}

// Checkpoints lists the workspace's checkpoints, newest first.
func (s *Service) Checkpoints(ctx context.Context) (CheckpointList, error) {
	s.chg.mu.Lock()
	defer s.chg.mu.Unlock()
	cur, err := s.current()
	if err != nil {
		return CheckpointList{}, err
	}
	return cur.Checkpoints(ctx)
}

// Undo restores the workspace to what it was before checkpoint id (""
// is the newest not undone).
func (s *Service) Undo(ctx context.Context, id string) (changes.Checkpoint, error) {
	s.chg.mu.Lock()
	defer s.chg.mu.Unlock()
	cur, err := s.current()
	if err != nil {
		return changes.Checkpoint{}, err
	}
	return cur.Undo(ctx, id)
}

// closeHeld releases the store, once no task or VM uses it.
func (s *Service) closeHeld() error {
	s.chg.mu.Lock()
	defer s.chg.mu.Unlock()
	if s.chg.cur == nil {
		return nil
	}
	err := s.chg.cur.Close()
	s.chg.cur = nil
	return err
}

// publishPending sends a "changes" event with the pending count.
func (s *Service) publishPending(cur *Held) {
	n, err := cur.Store.Pending()
	if err != nil {
		return
	}
	e := Event{Kind: "changes", Type: "changes", Pending: &n}
	s.chg.subMu.Lock()
	defer s.chg.subMu.Unlock()
	for ch := range s.chg.subs {
		select {
		case ch <- e:
		default: // a consumer that does not keep up re-reads Changes
		}
	}
}

// subscribeChanges returns a channel of "changes" events until ctx ends.
func (s *Service) subscribeChanges(ctx context.Context) <-chan Event {
	ch := make(chan Event, 16)
	s.chg.subMu.Lock()
	if s.chg.subs == nil {
		s.chg.subs = map[chan Event]struct{}{}
	}
	s.chg.subs[ch] = struct{}{}
	s.chg.subMu.Unlock()
	go func() {
		<-ctx.Done()
		s.chg.subMu.Lock()
		delete(s.chg.subs, ch)
		s.chg.subMu.Unlock()
		close(ch)
	}()
	return ch
}

// checkMode reads a changes mode a front door passed ("" keeps the
// workspace's mode).
func checkMode(m changes.Mode) error {
	if m == "" {
		return nil
	}
	if _, err := changes.ParseMode(string(m)); err != nil {
		return fmt.Errorf("%w: %w", ErrBadMode, err)
	}
	return nil
}

// ErrBadMode marks a changes mode that is not one.
var ErrBadMode = errors.New("invalid changes mode")
