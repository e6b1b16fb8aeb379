//go:build e2e

package robust

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/app/api"
	"github.com/airlock-sandbox/airlock/app/service"
	"github.com/airlock-sandbox/airlock/app/settings"
	"github.com/airlock-sandbox/airlock/app/tasks"
	"github.com/airlock-sandbox/airlock/tests/internal/vmharness"
)

// served is one `airlock serve` process with its own folders under root.
type served struct {
	t      *testing.T
	root   string
	env    []string
	cmd    *exec.Cmd
	stderr *lockedBuffer
	client *api.Client
	exited chan struct{}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// writeSettings writes the settings file serve will load.
func writeSettings(t *testing.T, root string, st settings.Settings) {
	t.Helper()
	p := filepath.Join(root, "config", "airlock", "settings.json")
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(st)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func startServe(t *testing.T, root string) *served {
	t.Helper()
	s := &served{t: t, root: root, stderr: &lockedBuffer{}, exited: make(chan struct{}), env: append(os.Environ(),
		"AIRLOCK_IMAGE_DIR="+imageRoot,
		"XDG_RUNTIME_DIR="+filepath.Join(root, "run"),
		"XDG_CONFIG_HOME="+filepath.Join(root, "config"),
		"XDG_STATE_HOME="+filepath.Join(root, "state"),
		"XDG_CACHE_HOME="+filepath.Join(root, "cache"))}
	s.cmd = exec.Command(airlockBin, "serve")
	s.cmd.Env = s.env
	s.cmd.Stderr = s.stderr
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.cmd.Wait(); close(s.exited) }()
	s.client = api.NewClient(filepath.Join(root, "run", "airlock", "airlock.sock"))
	for i := 0; s.client.Ping(context.Background()) != nil; i++ {
		if i > 600 {
			t.Fatalf("airlock serve did not answer: %s", s.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Cleanup(s.stop)
	return s
}

// stop ends serve in order (SIGINT), once.
func (s *served) stop() {
	select {
	case <-s.exited:
		return
	default:
	}
	s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.exited:
	case <-time.After(90 * time.Second):
		s.cmd.Process.Kill()
		s.t.Errorf("airlock serve did not stop on SIGINT: %s", s.stderr.String())
	}
}

// kill ends serve with SIGKILL, as a crash would.
func (s *served) kill() {
	s.cmd.Process.Kill()
	<-s.exited
}

func (s *served) run(req service.RunRequest) tasks.Task {
	s.t.Helper()
	tk, err := s.client.Run(context.Background(), req)
	if err != nil {
		s.t.Fatalf("run %q: %v", req.Shell, err)
	}
	return tk
}

func (s *served) wait(id string) tasks.Task {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	tk, err := s.client.Wait(ctx, id)
	if err != nil {
		s.t.Fatalf("wait for %s: %v\n%s%s", id, err, s.stderr.String(), s.consoleTail())
	}
	return tk
}

// consoleTail returns the end of the session's guest console (the previous
// boot's too, when the VM was restarted), for a failure message: a guest
// that never became ready says why only there, and the folder holding it
// goes with the test.
func (s *served) consoleTail() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := s.client.Status(ctx)
	if err != nil || st.Session.ConsoleLog == "" {
		return ""
	}
	var out string
	for _, p := range []string{st.Session.ConsoleLog + ".1", st.Session.ConsoleLog} {
		if tail, err := vmharness.ConsoleTail(p, 6000); err == nil && tail != "" {
			out += fmt.Sprintf("\nguest console %s ends with:\n%s", p, tail)
		}
	}
	return out
}

// waitOutput waits until a task has stored at least n bytes of stdout.
func (s *served) waitOutput(id string, n int64) {
	s.t.Helper()
	for i := 0; ; i++ {
		tk, err := s.client.Task(context.Background(), id)
		if err != nil {
			s.t.Fatal(err)
		}
		if tk.Output.Stdout >= n {
			return
		}
		if tk.State.Final() || i > 3000 {
			s.t.Fatalf("task %s never wrote %d bytes: %+v", id, n, tk)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *served) log(id string) []byte {
	s.t.Helper()
	b, err := readAll(func(off int64) ([][]byte, int64, error) {
		chunks, next, err := s.client.Logs(context.Background(), id, off)
		var out [][]byte
		for _, c := range chunks {
			out = append(out, c.Data)
		}
		return out, next, err
	})
	if err != nil {
		s.t.Fatalf("log of %s: %v", id, err)
	}
	return b
}

func (s *served) status() service.Status {
	s.t.Helper()
	st, err := s.client.Status(context.Background())
	if err != nil {
		s.t.Fatal(err)
	}
	return st
}

// works runs an ordinary task and fails the test unless it works.
func (s *served) works(what string) {
	s.t.Helper()
	tk := s.wait(s.run(service.RunRequest{Shell: "cd /; echo works"}).ID)
	if out := string(s.log(tk.ID)); tk.State != tasks.Exited || tk.Exit.Code != 0 || out != "works\n" {
		s.t.Fatalf("%s: the next task: %s %+v %q (%s)\n%s%s", what, tk.State, tk.Exit, out, tk.Reason, s.stderr.String(), s.consoleTail())
	}
}

// repeat returns the bytes `yes word | head -c n` prints.
func repeat(word string, n int) []byte {
	return bytes.Repeat([]byte(word+"\n"), n/(len(word)+1)+1)[:n]
}
