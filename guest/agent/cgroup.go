//go:build linux

package agent

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// maxIdleCgroups bounds the empty task cgroups kept for reuse. Making and
// removing a cgroup costs a task about a millisecond under emulation
// (cgroupfs creates and tears down every controller's files), so a task
// whose tree is gone hands its empty cgroup to the next task instead.
const maxIdleCgroups = 4

// cgroups makes one cgroup v2 per task under root.
type cgroups struct {
	root string
	next atomic.Uint64

	mu      sync.Mutex
	rootOK  bool      // root exists
	idle    []*cgroup // empty, ready for the next task
	closing bool      // drain called: nothing goes back to idle
}

// cgroup is one task's cgroup. fd is an open directory handle the child is
// cloned into (CLONE_INTO_CGROUP), so even its first instruction runs inside.
// killFD (cgroup.kill, -1 before Linux 5.14) and eventsFD (cgroup.events)
// stay open with it: these are kernfs files, which os.File would register
// with the netpoller on every open.
type cgroup struct {
	dir      string
	fd       int
	killFD   int
	eventsFD int
	// private is set for a root task's cgroup: root may have changed its
	// limits, frozen it or made child cgroups in it, which the next task
	// must not inherit, so it is not reused.
	private bool
	// killed is set once cgroup.kill was written. Such a cgroup is not
	// reused: Linux reads the kill sequence for CLONE_INTO_CGROUP from the
	// parent's cgroup but compares it with the target's, so every child
	// cloned into a cgroup that was ever killed is SIGKILLed at birth.
	killed atomic.Bool
}

// create returns an empty cgroup for a task: an idle one, else a new one.
func (c *cgroups) create() (*cgroup, error) {
	c.mu.Lock()
	if n := len(c.idle); n > 0 {
		g := c.idle[n-1]
		c.idle = c.idle[:n-1]
		c.mu.Unlock()
		return g, nil
	}
	rootOK := c.rootOK
	c.mu.Unlock()
	if !rootOK {
		if err := os.MkdirAll(c.root, 0o755); err != nil {
			return nil, fmt.Errorf("cgroup: %w", err)
		}
		c.mu.Lock()
		c.rootOK = true
		c.mu.Unlock()
	}
	for range 100 {
		dir := filepath.Join(c.root, strconv.FormatUint(c.next.Add(1), 10))
		// 0700: a task (uid 1000) must not read another task's pids,
		// memory use or events; the agent works on it as root.
		err := unix.Mkdir(dir, 0o700)
		if errors.Is(err, unix.EEXIST) {
			continue // left over from an earlier agent run
		}
		if errors.Is(err, unix.ENOENT) {
			// The root went away (a test, or someone with root in the
			// guest): make it again next time.
			c.mu.Lock()
			c.rootOK = false
			c.mu.Unlock()
		}
		if err != nil {
			return nil, fmt.Errorf("cgroup: mkdir %s: %w", dir, err)
		}
		g, err := openCgroup(dir)
		if err != nil {
			_ = unix.Rmdir(dir)
			return nil, err
		}
		return g, nil
	}
	return nil, fmt.Errorf("cgroup: no free name under %s", c.root)
}

func openCgroup(dir string) (*cgroup, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("cgroup: open %s: %w", dir, err)
	}
	ev, err := unix.Openat(fd, "cgroup.events", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("cgroup: open %s/cgroup.events: %w", dir, err)
	}
	kill, err := unix.Openat(fd, "cgroup.kill", unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		kill = -1 // before Linux 5.14: kill falls back to cgroup.procs
	}
	return &cgroup{dir: dir, fd: fd, killFD: kill, eventsFD: ev}, nil
}

func (g *cgroup) close() {
	if g.killFD >= 0 {
		unix.Close(g.killFD)
	}
	unix.Close(g.eventsFD)
	unix.Close(g.fd)
}

// release is called when a task is over and its tree was killed: an empty
// cgroup of a task that was not root and never killed is kept for the next
// task (up to maxIdleCgroups), anything else is removed once its processes
// are gone.
func (c *cgroups) release(g *cgroup) error {
	if !g.private && !g.killed.Load() && g.empty() {
		c.mu.Lock()
		if !c.closing && len(c.idle) < maxIdleCgroups {
			c.idle = append(c.idle, g)
			c.mu.Unlock()
			return nil
		}
		c.mu.Unlock()
	}
	return g.remove()
}

// drain removes the idle cgroups; release removes from then on.
func (c *cgroups) drain() {
	c.mu.Lock()
	idle := c.idle
	c.idle, c.closing = nil, true
	c.mu.Unlock()
	for _, g := range idle {
		_ = g.remove()
	}
}

// kill SIGKILLs every process in g. Kernels before 5.14 have no cgroup.kill;
// then each listed process is killed until none is left (a fork racing the
// loop lands in the same cgroup and is found on the next pass).
func (g *cgroup) kill() error {
	g.killed.Store(true)
	if g.killFD >= 0 {
		if _, err := unix.Write(g.killFD, []byte("1")); err == nil {
			return nil
		}
	}
	for range 100 {
		b, rerr := os.ReadFile(filepath.Join(g.dir, "cgroup.procs"))
		if rerr != nil {
			return fmt.Errorf("cgroup: kill: %w", rerr)
		}
		pids := bytes.Fields(b)
		if len(pids) == 0 {
			return nil
		}
		for _, p := range pids {
			if pid, perr := strconv.Atoi(string(p)); perr == nil && pid > 0 {
				_ = unix.Kill(pid, unix.SIGKILL)
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	return fmt.Errorf("cgroup: %s: processes keep appearing", g.dir)
}

// populated reports whether any live process is left in g.
func (g *cgroup) populated() bool {
	b, ok := g.events()
	return ok && bytes.Contains(b, []byte("populated 1"))
}

// empty reports whether g is known to hold no process.
func (g *cgroup) empty() bool {
	b, ok := g.events()
	return ok && bytes.Contains(b, []byte("populated 0"))
}

func (g *cgroup) events() ([]byte, bool) {
	var b [256]byte
	n, err := unix.Pread(g.eventsFD, b[:], 0)
	if err != nil || n <= 0 {
		return nil, false
	}
	return b[:n], true
}

// remove waits (bounded) for killed processes to leave g, then removes it.
func (g *cgroup) remove() error {
	defer g.close()
	var err error
	for i := range 200 {
		if !g.populated() {
			if err = unix.Rmdir(g.dir); err == nil || errors.Is(err, unix.ENOENT) {
				return nil
			}
		}
		if i%50 == 49 {
			_ = g.kill()
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("cgroup: remove %s: %v (still populated: %v)", g.dir, err, g.populated())
}
