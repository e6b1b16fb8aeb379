package service

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/app/session"
	"github.com/airlock-sandbox/airlock/app/tasks"
)

// The workspace quota (settings workspace_quota_mib) is enforced on the
// host, because the guest is not trusted to enforce anything: while the VM
// runs, the host walks the shared folder and adds up what its files take on
// disk. Past the quota it ends every running task with a reason that says
// so, stops the VM (so nothing left behind in the guest keeps writing), and
// refuses new tasks until the folder is back under the quota.
//
// Its limits: it notices within quotaInterval plus the time a walk takes,
// so a guest writing fast goes over by what it writes in that time (at a
// few hundred MB/s over the share, a second or two's worth); it counts
// allocated blocks (sparse files count what they hold, empty files and
// folders count nothing, so a flood of empty files is not stopped by it);
// and the walk costs time in proportion to the number of files, which is
// why it pauses four times as long as the last walk took.

// quotaInterval is the shortest pause between two walks of the workspace.
// A variable only so tests need not wait.
var quotaInterval = 2 * time.Second

// quotaWatch is the state of the workspace quota's watch.
type quotaWatch struct {
	mu   sync.Mutex
	over string // why tasks are refused; "" when under the quota
	stop context.CancelFunc
}

// ErrOverQuota is returned by Run while the workspace is over its quota.
var ErrOverQuota = errors.New("the workspace is over its quota")

func (q *quotaWatch) reason() string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.over
}

func (q *quotaWatch) set(reason string) {
	q.mu.Lock()
	q.over = reason
	q.mu.Unlock()
}

// startQuota starts the watch; Close stops it.
func (s *Service) startQuota() {
	ctx, cancel := context.WithCancel(context.Background())
	s.quota.stop = cancel
	s.wg.Go(func() {
		wait := quotaInterval
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			began := time.Now()
			s.checkQuota(ctx, false)
			wait = max(quotaInterval, 4*time.Since(began))
		}
	})
}

// checkQuota measures the workspace when the quota is on and something may
// write to it (a task, a VM, or an earlier excess to clear), and acts on it.
// It returns the reason tasks are refused, or "".
func (s *Service) checkQuota(ctx context.Context, always bool) string {
	s.mu.Lock()
	st, busy := s.settings, len(s.running) > 0
	s.mu.Unlock()
	if st.WorkspaceQuotaMiB == 0 || st.Workspace == "" || st.ReadOnly {
		s.quota.set("")
		return ""
	}
	if !always && !busy && s.sess.Status().State == session.StateStopped && s.quota.reason() == "" {
		return ""
	}
	limit := int64(st.WorkspaceQuotaMiB) << 20
	used, err := diskUsage(ctx, st.Workspace, limit)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("workspace quota: could not measure the folder", "dir", st.Workspace, "err", err)
		}
		return s.quota.reason()
	}
	if used <= limit {
		s.quota.set("")
		return ""
	}
	reason := fmt.Sprintf("the workspace %s holds more than its quota of %d MiB (workspace_quota_mib in the settings): "+
		"free space in it, or raise the quota, then run the task again", st.Workspace, st.WorkspaceQuotaMiB)
	if s.quota.reason() == "" {
		s.log.Warn("workspace over its quota: stopping its tasks and the VM", "dir", st.Workspace, "quota_mib", st.WorkspaceQuotaMiB)
	}
	s.quota.set(reason)
	s.stopForQuota(reason)
	return reason
}

// stopForQuota ends every running task with reason and stops the VM.
func (s *Service) stopForQuota(reason string) {
	s.mu.Lock()
	running := make(map[string]*runningTask, len(s.running))
	for id, r := range s.running {
		r.cancelled = true
		running[id] = r
	}
	s.mu.Unlock()
	for id, r := range running {
		// Final first, so the VM stopping under it does not make it "lost".
		s.finish(id, tasks.Killed, tasks.Exit{Signal: int(syscall.SIGKILL)}, reason)
		r.cancel()
	}
	if s.sess.Status().State != session.StateStopped {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.sess.Stop(ctx); err != nil {
			s.log.Warn("workspace quota: stop the VM", "err", err)
		}
	}
}

// diskUsage adds up what the files under dir take on disk, without
// following symbolic links, and stops counting once past limit.
func diskUsage(ctx context.Context, dir string, limit int64) (int64, error) {
	var used int64
	errOver := errors.New("over")
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if path == dir {
				return err
			}
			return nil // vanished or unreadable: the guest may be changing the tree
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		if used += allocated(fi); used > limit {
			return errOver
		}
		return nil
	})
	if errors.Is(err, errOver) {
		err = nil
	}
	return used, err
}
