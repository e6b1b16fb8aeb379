//go:build e2e && linux

package qemu

// The QMP client against a real QEMU: go test -tags e2e -run QMP ./vm/qemu.
// No guest image is needed: the machines run no kernel.

import (
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// qmpQEMU is a QEMU started for these tests, with its machine protocol.
type qmpQEMU struct {
	q      *qmp
	done   chan struct{} // closed once QEMU has exited; err is then set
	err    error
	stderr *tail
}

// startQMPQEMU starts qemu-system-x86_64 with args, the machine protocol
// on fd 3 and extra from fd 4 on, and connects to it.
func startQMPQEMU(t *testing.T, args []string, extra ...*os.File) *qmpQEMU {
	t.Helper()
	bin, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		t.Skip("qemu-system-x86_64 not installed (apt install qemu-system-x86)")
	}
	host, child, err := socketPair()
	if err != nil {
		t.Fatal(err)
	}
	args = slices.Concat(args, []string{"-chardev", "socket,id=qmp,fd=3", "-mon", "chardev=qmp,mode=control"})
	cmd := exec.Command(bin, args...)
	p := &qmpQEMU{done: make(chan struct{}), stderr: newTail(4 << 10)}
	cmd.Stdout, cmd.Stderr = p.stderr, p.stderr
	cmd.ExtraFiles = append([]*os.File{child}, extra...)
	setProcAttr(cmd)
	err = cmd.Start()
	child.Close() // QEMU's copy only: its exit is then the connection's end
	if err != nil {
		host.Close()
		t.Fatal(err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-p.done
	})
	c, err := net.FileConn(host)
	host.Close()
	if err != nil {
		t.Fatal(err)
	}
	p.q, err = newQMP(testContext(t, 10*time.Second), c.(*net.UnixConn))
	if err != nil {
		t.Fatalf("%v (stderr: %s)", err, p.stderr)
	}
	t.Cleanup(func() { p.q.Close() })
	return p
}

// status is QEMU's run state.
func (p *qmpQEMU) status(t *testing.T) string {
	t.Helper()
	var st struct {
		Status string `json:"status"`
	}
	if err := p.q.execute(testContext(t, 5*time.Second), "query-status", nil, &st); err != nil {
		t.Fatal(err)
	}
	return st.Status
}

// quit ends QEMU and checks that it exits cleanly.
func (p *qmpQEMU) quit(t *testing.T) {
	t.Helper()
	if err := p.q.execute(testContext(t, 5*time.Second), "quit", nil, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
		if p.err != nil {
			t.Errorf("QEMU exited: %v (stderr: %s)", p.err, p.stderr)
		}
	case <-time.After(10 * time.Second):
		t.Error("QEMU still running 10 s after quit")
	}
}

func TestQMPE2E(t *testing.T) {
	p := startQMPQEMU(t, []string{"-M", "none", "-nodefaults", "-no-user-config", "-display", "none"})
	q := p.q
	ctx := testContext(t, 30*time.Second)
	t.Logf("QEMU %+v", q.version)
	if q.version.Major < 7 {
		t.Errorf("version %+v", q.version)
	}
	if st := p.status(t); st != "running" {
		t.Errorf("status %q", st)
	}

	// getfd: QEMU holds the pipe's write end, so no end of file until
	// closefd.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := q.sendFD(ctx, "probe", w); err != nil {
		t.Fatal(err)
	}
	w.Close()
	r.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := r.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read with QEMU holding the write end: %v", err)
	}
	if err := q.execute(ctx, "closefd", map[string]string{"fdname": "probe"}, nil); err != nil {
		t.Fatal(err)
	}
	r.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("read after closefd: %v", err)
	}
	err = q.execute(ctx, "closefd", map[string]string{"fdname": "probe"}, nil)
	var qe *qmpError
	if !errors.As(err, &qe) || qe.Class != "GenericError" {
		t.Errorf("closefd twice: %v", err)
	}
	t.Logf("closefd twice: %v", err)

	var mig struct {
		Status string `json:"status"`
	}
	if err := q.execute(ctx, "query-migrate", nil, &mig); err != nil || mig.Status != "" {
		t.Errorf("query-migrate before any migration: %+v, %v", mig, err)
	}

	err = q.execute(ctx, "airlock-no-such-command", nil, nil)
	if !errors.As(err, &qe) || qe.Class != "CommandNotFound" {
		t.Errorf("unknown command: %v", err)
	}
	t.Logf("unknown command: %v", err)

	p.quit(t)
	for _, e := range q.recentEvents() {
		t.Logf("event skipped: %s %s", e.Event, e.Data)
	}
	err = q.execute(ctx, "query-status", nil, nil)
	if !errors.Is(err, errQMPClosed) {
		t.Errorf("after quit: %v", err)
	}
	t.Logf("after quit: %v", err)
}

// TestQMPE2EMigrate saves a tiny machine's state to a file the way a
// template is saved (stop, getfd, migrate to fd:, query-migrate until
// completed) and loads it in a second QEMU, from the file and through a
// pipe (where the load can be seen in progress).
func TestQMPE2EMigrate(t *testing.T) {
	base := []string{"-M", "microvm", "-nodefaults", "-no-user-config", "-display", "none", "-m", "64M"}
	// The loaded machine takes the status the saved one had when the
	// migration began: a machine stopped first loads paused (or in
	// prelaunch), one migrated running starts running.
	for _, tc := range []struct {
		name   string
		args   []string
		stop   bool
		loaded string
	}{
		{"prelaunch", slices.Concat(base, []string{"-S"}), true, "prelaunch"},
		{"stopped", base, true, "paused"},
		{"running", base, false, "running"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := filepath.Join(t.TempDir(), "vmstate")
			saveTiny(t, tc.args, state, tc.stop)
			data, err := os.ReadFile(state)
			if err != nil {
				t.Fatal(err)
			}

			t.Run("from a file", func(t *testing.T) {
				f, err := os.Open(state)
				if err != nil {
					t.Fatal(err)
				}
				began := time.Now()
				p := startQMPQEMU(t, slices.Concat(tc.args, []string{"-incoming", "fd:4"}), f)
				f.Close()
				seen := awaitLoaded(t, p)
				t.Logf("load from a file: %s, statuses %q", time.Since(began).Round(time.Millisecond), seen)
				checkLoaded(t, p, seen, tc.loaded)
			})

			t.Run("through a pipe", func(t *testing.T) {
				r, w, err := os.Pipe()
				if err != nil {
					t.Fatal(err)
				}
				defer w.Close()
				p := startQMPQEMU(t, slices.Concat(tc.args, []string{"-incoming", "fd:4"}), r)
				r.Close()
				if st := p.status(t); st != "inmigrate" {
					t.Fatalf("status %q before the state arrives", st)
				}
				began := time.Now()
				if _, err := w.Write(data); err != nil {
					t.Fatal(err)
				}
				w.Close()
				seen := awaitLoaded(t, p)
				t.Logf("load through a pipe: %s after the state was written, statuses %q", time.Since(began).Round(time.Millisecond), seen)
				checkLoaded(t, p, append([]string{"inmigrate"}, seen...), tc.loaded)
			})
		})
	}
}

// saveTiny runs a machine with args, stops it if asked and saves its
// state into path, then checks that it can go on.
func saveTiny(t *testing.T, args []string, path string, stop bool) {
	t.Helper()
	p := startQMPQEMU(t, args)
	q := p.q
	ctx := testContext(t, 30*time.Second)
	began := time.Now()
	if stop {
		before := p.status(t)
		if err := q.execute(ctx, "stop", nil, nil); err != nil {
			t.Fatal(err)
		}
		t.Logf("source: %s, stopped: %s", before, p.status(t))
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	err = q.sendFD(ctx, "vmstate", f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := q.execute(ctx, "migrate", map[string]string{"uri": "fd:vmstate"}, nil); err != nil {
		t.Fatal(err)
	}
	var seen []string
	for {
		var mig struct {
			Status string `json:"status"`
			Error  string `json:"error-desc"`
		}
		if err := q.execute(ctx, "query-migrate", nil, &mig); err != nil {
			t.Fatal(err)
		}
		if len(seen) == 0 || seen[len(seen)-1] != mig.Status {
			seen = append(seen, mig.Status)
		}
		if mig.Status == "completed" {
			break
		}
		if mig.Status == "failed" || mig.Status == "cancelled" {
			t.Fatalf("migrate: %s: %s", mig.Status, mig.Error)
		}
		time.Sleep(2 * time.Millisecond)
	}
	took := time.Since(began)
	fi, err := os.Stat(path)
	if err != nil || fi.Size() == 0 {
		t.Fatalf("saved state: %v, %v", fi, err)
	}
	t.Logf("save: %s, %d bytes, query-migrate statuses %q", took.Round(time.Millisecond), fi.Size(), seen)
	if st := p.status(t); st != "postmigrate" {
		t.Errorf("after the save: status %q", st)
	}
	if err := q.execute(ctx, "cont", nil, nil); err != nil {
		t.Fatal(err)
	}
	if st := p.status(t); st != "running" {
		t.Errorf("after cont: status %q", st)
	}
	p.quit(t)
}

// awaitLoaded polls an incoming machine's status until it is no longer
// loading, and returns the statuses seen.
func awaitLoaded(t *testing.T, p *qmpQEMU) []string {
	t.Helper()
	var seen []string
	deadline := time.Now().Add(30 * time.Second)
	for {
		st := p.status(t)
		if len(seen) == 0 || seen[len(seen)-1] != st {
			seen = append(seen, st)
		}
		if st != "inmigrate" {
			return seen
		}
		if time.Now().After(deadline) {
			t.Fatalf("still loading after 30 s (stderr: %s)", p.stderr)
		}
		time.Sleep(time.Millisecond)
	}
}

// checkLoaded checks a loaded machine: it ended loading in status loaded,
// the migration completed, and it runs on cont.
func checkLoaded(t *testing.T, p *qmpQEMU, seen []string, loaded string) {
	t.Helper()
	ctx := testContext(t, 30*time.Second)
	for i, st := range seen {
		if st != "inmigrate" && (st != loaded || i != len(seen)-1) {
			t.Errorf("statuses %q: want inmigrate, then %s", seen, loaded)
		}
	}
	var mig struct {
		Status string `json:"status"`
	}
	if err := p.q.execute(ctx, "query-migrate", nil, &mig); err != nil || mig.Status != "completed" {
		t.Errorf("incoming query-migrate: %+v, %v", mig, err)
	}
	if err := p.q.execute(ctx, "cont", nil, nil); err != nil {
		t.Fatal(err)
	}
	if st := p.status(t); st != "running" {
		t.Errorf("after cont: status %q", st)
	}
	p.quit(t)
	if s := p.stderr.String(); s != "" {
		t.Logf("stderr: %s", s)
	}
}
