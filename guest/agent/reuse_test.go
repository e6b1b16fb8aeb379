//go:build linux

package agent

import (
	"path/filepath"
	"strings"
	"testing"
)

// A task's empty cgroup serves the next task; one whose leftovers were
// killed does not (a child cloned into it would be SIGKILLed at birth).
func TestCgroupReuse(t *testing.T) {
	e := newEnv(t)
	if !e.cgroups {
		t.Skip("no writable cgroup2")
	}
	cgOf := func(r *result) string { // the cgroup2 line of /proc/self/cgroup
		for _, l := range strings.Split(r.stdout.String(), "\n") {
			if strings.HasPrefix(l, "0::") {
				return l
			}
		}
		return ""
	}
	a := mustRun(t, e, shell("cat /proc/self/cgroup"))
	b := mustRun(t, e, shell("cat /proc/self/cgroup"))
	if cgOf(a) == "" || cgOf(a) != cgOf(b) {
		t.Errorf("an empty cgroup was not reused: %q then %q", cgOf(a), cgOf(b))
	}
	// A root task's cgroup is not reused: root may have changed it.
	rootStart := shell("cat /proc/self/cgroup")
	rootStart.Root = true
	ra := mustRun(t, e, rootStart)
	rb := mustRun(t, e, shell("cat /proc/self/cgroup"))
	if cgOf(ra) == "" || cgOf(ra) == cgOf(rb) {
		t.Errorf("a root task's cgroup %q was reused", cgOf(ra))
	}
	// Leftovers: the cgroup is killed, then removed.
	pidfile := filepath.Join(e.workspace, "daemon")
	k := mustRun(t, e, shell("cat /proc/self/cgroup; "+daemonScript(pidfile)))
	if alive(readPid(t, pidfile)) {
		t.Fatal("daemon outlived its task")
	}
	killed := cgOf(k)
	for range 5 {
		r := mustRun(t, e, shell("cat /proc/self/cgroup; echo ok"))
		if r.exit.GetSignal() != 0 || !strings.HasSuffix(r.stdout.String(), "ok\n") {
			t.Fatalf("task after a killed cgroup: exit %v, stdout %q", r.exit, r.stdout.String())
		}
		if cgOf(r) == killed {
			t.Errorf("killed cgroup %s reused", killed)
		}
	}
}
