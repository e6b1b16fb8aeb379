//go:build linux

package agent

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/guest/api"
	agentv1 "github.com/airlock-sandbox/airlock/guest/api/agent/v1"
	"github.com/airlock-sandbox/airlock/guest/mux"
)

// spliceEnv is newEnv with tasks served over the mux, whose guest side
// holds its connection as a file with Config.Splice, as on the serial
// port: output is spliced. The test's streams reach it through a relay
// from ServeExec's usual loopback address.
func spliceEnv(t *testing.T) *env {
	t.Helper()
	e := newEnv(t)
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		if err := unix.SetNonblock(fd, true); err != nil {
			t.Fatal(err)
		}
	}
	hf := os.NewFile(uintptr(fds[0]), "host")
	hc, err := net.FileConn(hf)
	hf.Close()
	if err != nil {
		t.Fatal(err)
	}
	hs := mux.Client(hc, mux.Config{})
	gs := mux.Server(os.NewFile(uintptr(fds[1]), "guest"), mux.Config{Splice: true})
	l, err := gs.Listen(api.PortExec)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- e.srv.ServeExec(l) }()
	relay, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := relay.Accept()
			if err != nil {
				return
			}
			m, err := hs.Dial(context.Background(), api.PortExec)
			if err != nil {
				c.Close()
				continue
			}
			wg.Add(2)
			go func() { defer wg.Done(); io.Copy(m, c); m.Close() }()
			go func() { defer wg.Done(); io.Copy(c, m); c.Close() }()
		}
	}()
	t.Cleanup(func() {
		relay.Close()
		l.Close()
		<-served
		hs.Close()
		gs.Close()
		wg.Wait()
	})
	e.execAddr = relay.Addr().String()
	return e
}

// TestSplicedOutput: output that goes by splice arrives whole and in
// order, stdout and stderr apart, all of it before the exit status (collect
// fails on a frame after Exit); small outputs too.
func TestSplicedOutput(t *testing.T) {
	e := spliceEnv(t)
	data := make([]byte, 8<<20)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.workspace, "big"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	before := spliced.Load()
	r := mustRun(t, e, &agentv1.ExecStart{Shell: "cat big; cat big >&2; dd if=big bs=1M 2>/dev/null", Cwd: e.workspace})
	want := append(bytes.Clone(data), data...)
	if !bytes.Equal(r.stdout.Bytes(), want) {
		t.Errorf("stdout: %d bytes, want %d, sha256 %x", r.stdout.Len(), len(want), sha256.Sum256(r.stdout.Bytes()))
	}
	if !bytes.Equal(r.stderr.Bytes(), data) {
		t.Errorf("stderr: %d bytes, want %d", r.stderr.Len(), len(data))
	}
	if got := spliced.Load() - before; got < int64(len(data)) {
		t.Errorf("%d bytes spliced of %d", got, 3*len(data))
	}

	// Small writes with large ones between them: both paths, in order.
	var sb strings.Builder
	for i := range 200 {
		fmt.Fprintf(&sb, "line %d\n", i)
		if i%50 == 0 {
			sb.WriteString(strings.Repeat("x", 100<<10))
		}
	}
	r = mustRun(t, e, shell(`i=0; while [ $i -lt 200 ]; do echo "line $i"; if [ $((i%50)) = 0 ]; then head -c 102400 /dev/zero | tr '\0' x; fi; i=$((i+1)); done`))
	if r.stdout.String() != sb.String() {
		t.Errorf("stdout of mixed writes: %d bytes, want %d", r.stdout.Len(), sb.Len())
	}

	r = mustRun(t, e, shell("echo hi; echo there >&2"))
	if r.stdout.String() != "hi\n" || r.stderr.String() != "there\n" || r.exit.GetCode() != 0 {
		t.Errorf("small task: %q %q %v", r.stdout.String(), r.stderr.String(), r.exit)
	}
}
