package cli

import (
	"context"
	"fmt"
	"time"
)

// parentPoll is how often serve --parent-pid looks at its parent: the
// helper of an app that crashed stops within about this long.
const parentPoll = 500 * time.Millisecond

// watchParent returns a context that is done once the process pid has
// ended (or ctx is done). It fails at once when pid names no process.
// When pid is this process's parent, as for the desktop app's helper, an
// ended parent is seen as the parent id changing (the orphan is adopted
// by init, launchd or a subreaper), which a reused process id cannot
// fool; another process is looked up by its id.
func watchParent(ctx context.Context, pid int, poll time.Duration) (context.Context, context.CancelFunc, error) {
	if pid <= 0 {
		return nil, nil, fmt.Errorf("--parent-pid %d: not a process id", pid)
	}
	p, err := openProcess(pid)
	if err != nil {
		return nil, nil, fmt.Errorf("--parent-pid %d: %w", pid, err)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		defer p.close()
		t := time.NewTicker(poll)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if p.gone() {
				cancel(fmt.Errorf("the process named by --parent-pid (pid %d) ended", pid))
				return
			}
		}
	}()
	return ctx, func() { cancel(nil) }, nil
}
