//go:build e2e

package security

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/app/egress"
	"github.com/airlock-sandbox/airlock/guest/client"
)

// background runs spec on the shared VM until the test ends, and returns
// its first line of output and a channel closed when it exits.
func background(t *testing.T, spec client.Spec) (first string, exited <-chan struct{}) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		shared.Agent().Exec(ctx, spec, client.Stdio{Stdout: pw, Stderr: pw})
		pw.Close()
	}()
	t.Cleanup(func() { cancel(); <-done })
	lines := make(chan string, 1)
	go func() {
		br := bufio.NewReader(pr)
		l, _ := br.ReadString('\n')
		lines <- strings.TrimSpace(l)
		io.Copy(io.Discard, br)
	}()
	select {
	case first = <-lines:
	case <-time.After(2 * time.Minute):
		t.Fatalf("%v printed nothing", spec.Argv)
	}
	return first, done
}

// TestTaskIsolation29: one task cannot read another task's environment
// (its proxy credential) or open files, or signal it, though both run as
// the same user (issue 29, item 7).
func TestTaskIsolation29(t *testing.T) {
	t.Parallel()
	marker := fmt.Sprintf("iso29-%d", time.Now().UnixNano())
	sleepArg := fmt.Sprint(31_000_000 + time.Now().UnixNano()%1_000_000)
	u, p := gate.Credentials("victim-" + marker)
	spec := client.Spec{
		ID:   "victim-" + marker,
		Argv: []string{"sh", "-c", "exec 7>/tmp/" + marker + "; echo up; exec sleep " + sleepArg},
		Env:  append(egress.ProxyEnv(u, p), "VICTIM_MARKER="+marker),
	}
	first, victimExited := background(t, spec)
	if first != "up" {
		t.Fatalf("victim: %q", first)
	}

	cases := []struct{ name, cmd, secret string }{
		{"read another task's environment (its proxy credential)",
			"for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; done 2>/dev/null | grep -F -e " + marker + " -e " + u, u},
		{"list another task's open files",
			"ls -l /proc/[0-9]*/fd/ 2>/dev/null | grep -F " + marker, marker},
		{"read another task's environment through /proc/PID/task",
			"for f in /proc/[0-9]*/task/*/environ; do tr '\\0' '\\n' < $f; done 2>/dev/null | grep -F " + marker, marker},
	}
	for _, c := range cases {
		attack(t, privFamily, c.name, func(a *Attack) {
			r := user(a, c.cmd)
			if strings.Contains(r.Out(), c.secret) {
				a.breach("%s: %s", c.cmd, r)
			}
		})
	}
	attack(t, privFamily, "kill another task of the same user", func(a *Attack) {
		// The victim's sleep is found by its argument, as pkill would
		// (the pattern does not match the attacker's own command line).
		pattern := sleepArg[:len(sleepArg)-1] + "[" + sleepArg[len(sleepArg)-1:] + "]"
		cmd := "for d in /proc/[0-9]*; do grep -q '" + pattern + "' $d/cmdline 2>/dev/null && kill -9 ${d#/proc/} && echo killed; done; exit 1"
		r := user(a, cmd)
		select {
		case <-time.After(2 * time.Second):
		case <-victimExited:
		}
		if strings.Contains(r.Stdout, "killed") {
			a.breach("%s: %s", cmd, r)
		}
		if r := root(a, "for d in /proc/[0-9]*; do grep -q '"+pattern+"' $d/cmdline 2>/dev/null && echo alive; done"); !strings.Contains(r.Stdout, "alive") {
			a.breach("the victim task is gone: %s", r)
		}
	})
}

// TestTunnelShare29: a task that opens and holds more connections than the
// guest's forwarder carries at once does not leave another task without
// network (issue 29, item 7). Not parallel: the hog holds the forwarder's
// connections, and were the share to fail, every other test's connection
// would fail with it.
func TestTunnelShare29(t *testing.T) {
	p := probe(t)
	url := "http://allowed.test:" + allowedPort() + "/"
	for _, mode := range []struct{ name, hold string }{
		{"one task's silent connections starve another task's", "silent"},
		{"one task's connections with its credential starve another task's", url},
	} {
		attack(t, privFamily, mode.name, func(a *Attack) {
			id := fmt.Sprintf("hog-%d", taskN.Add(1))
			hu, hp := gate.Credentials(id)
			first, _ := background(a.T, client.Spec{ID: id, Argv: []string{p, "hold", "1100", mode.hold}, Env: egress.ProxyEnv(hu, hp)})
			if !strings.HasPrefix(first, "opened ") {
				a.Fatalf("the hog: %q", first)
			}
			a.Logf("the hog %s", first)
			_, r := netTask(a, p+" get "+url, "")
			if r.Exit.Code != 0 || !strings.Contains(r.Stdout, "200") {
				a.breach("another task's request failed while one task held its connections: %s", r)
			}
		})
	}
}

// allowedPort is the port of the allowed upstream.
func allowedPort() string {
	_, port, _ := strings.Cut(allowedAddr, ":")
	return port
}

// TestTaskIPC29: one task cannot read what another put in SysV shared
// memory or in /dev/shm (POSIX shared memory): each task has its own IPC
// namespace and /dev/shm, though both run as the same user. /tmp stays
// shared (a control): tasks are the commands of one session.
func TestTaskIPC29(t *testing.T) {
	t.Parallel()
	p := probe(t)
	marker := fmt.Sprintf("ipc29-%d", time.Now().UnixNano())
	key := fmt.Sprintf("%#x", 0x29000000+time.Now().UnixNano()%0xffffff)
	first, _ := background(t, client.Spec{Argv: []string{"sh", "-c",
		"echo " + marker + " > /dev/shm/" + marker + " && echo " + marker + " > /tmp/" + marker + " && " + p + " shmput " + key + " " + marker + " && exec sleep 1000"}})
	if first != "ok: put" {
		t.Fatalf("the victim task: %q", first)
	}
	if r := user(t, "cat /tmp/"+marker); !strings.Contains(r.Stdout, marker) {
		t.Fatalf("control: /tmp is no longer shared between tasks: %s", r)
	}
	for _, c := range []struct{ name, cmd string }{
		{"read another task's SysV shared memory", p + " shmget " + key},
		{"read another task's POSIX shared memory (/dev/shm)", "cat /dev/shm/" + marker + "; ls /dev/shm"},
	} {
		attack(t, privFamily, c.name, func(a *Attack) {
			if r := user(a, c.cmd); strings.Contains(r.Stdout, marker) {
				a.breach("%s: %s", c.cmd, r)
			}
		})
	}
}
