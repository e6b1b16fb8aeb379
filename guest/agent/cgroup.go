//go:build linux

package agent

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// cgroups makes one cgroup v2 per task under root.
type cgroups struct {
	root string
	next atomic.Uint64
}

// cgroup is one task's cgroup. fd is an open directory handle the child is
// cloned into (CLONE_INTO_CGROUP), so even its first instruction runs inside.
type cgroup struct {
	dir string
	fd  int
}

func (c *cgroups) create() (*cgroup, error) {
	if err := os.MkdirAll(c.root, 0o755); err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	for range 100 {
		dir := filepath.Join(c.root, strconv.FormatUint(c.next.Add(1), 10))
		// 0700: a task (uid 1000) must not read another task's pids,
		// memory use or events; the agent works on it as root.
		err := os.Mkdir(dir, 0o700)
		if errors.Is(err, os.ErrExist) {
			continue // left over from an earlier agent run
		}
		if err != nil {
			return nil, fmt.Errorf("cgroup: %w", err)
		}
		fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			_ = unix.Rmdir(dir)
			return nil, fmt.Errorf("cgroup: open %s: %w", dir, err)
		}
		return &cgroup{dir: dir, fd: fd}, nil
	}
	return nil, fmt.Errorf("cgroup: no free name under %s", c.root)
}

// kill SIGKILLs every process in g. Kernels before 5.14 have no cgroup.kill;
// then each listed process is killed until none is left (a fork racing the
// loop lands in the same cgroup and is found on the next pass).
func (g *cgroup) kill() error {
	err := os.WriteFile(filepath.Join(g.dir, "cgroup.kill"), []byte("1"), 0)
	if err == nil {
		return nil
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
	b, err := os.ReadFile(filepath.Join(g.dir, "cgroup.events"))
	if err != nil {
		return false
	}
	return bytes.Contains(b, []byte("populated 1"))
}

// remove waits (bounded) for killed processes to leave g, then removes it.
func (g *cgroup) remove() error {
	defer unix.Close(g.fd)
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
