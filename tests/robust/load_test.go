//go:build e2e

package robust

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/airlock-sandbox/airlock/app/service"
	"github.com/airlock-sandbox/airlock/app/settings"
	"github.com/airlock-sandbox/airlock/app/tasks"
	"github.com/airlock-sandbox/airlock/tests/internal/vmharness"
)

// Load sizes, and the bound on the service's memory under them.
const (
	loadTasks     = 64
	loadTaskBytes = 4 << 20 // per task, so 256 MiB of task output in all
	downloads     = 200
	downloadBytes = 512 << 10 // per download, so 100 MiB through the gate
	// serveRSSBound is the most resident memory `airlock serve` may reach
	// (its peak, VmHWM, over its whole life): output goes to disk as it
	// arrives and the gate relays without buffering whole bodies, so the
	// total moved (356 MiB) must not show up in the host's memory.
	serveRSSBound = 128 << 20
)

// TestLoad runs 64 tasks with large output and 200 downloads through the
// egress gate at the same time on one `airlock serve`, checks every byte
// (sha256 against what the host computes), and bounds the service's peak
// resident memory.
func TestLoad(t *testing.T) {
	// A plain HTTP server on the host, reached by the guest as files.test.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/blob/"))
		if err != nil {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(downloadBytes))
		w.Write(deterministic(uint64(n), downloadBytes))
	})}
	go srv.Serve(ln)
	defer srv.Close()
	port := ln.Addr().(*net.TCPAddr).Port

	root := t.TempDir()
	ws := filepath.Join(root, "ws")
	os.Mkdir(ws, 0o755)
	ws = vmharness.OwnedByTaskUser(ws)
	writeSettings(t, root, settings.Settings{
		Workspace: ws, CPUs: 2, MemoryMiB: 1024,
		Allow: []string{fmt.Sprintf("files.test:%d", port)}, MapHosts: []string{"files.test=127.0.0.1"},
	})
	s := startServe(t, root)
	if err := s.client.StartVM(t.Context()); err != nil {
		t.Fatal(err)
	}
	s.works("before the load")
	mem := watchMemory(s.cmd.Process.Pid)

	var wg sync.WaitGroup
	ids := make([]string, loadTasks)
	for i := range ids {
		wg.Go(func() {
			tk, err := s.client.Run(t.Context(), service.RunRequest{Shell: fmt.Sprintf("yes load-%02d | head -c %d", i, loadTaskBytes)})
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = tk.ID
		})
	}
	dl := s.run(service.RunRequest{Shell: fmt.Sprintf(
		`for i in $(seq 1 %d); do (wget -q -O - http://files.test:%d/blob/$i | sha256sum | sed "s/ .*/ $i/") & done; wait`, downloads, port)})
	wg.Wait()

	for i, id := range ids {
		if id == "" {
			continue
		}
		tk := s.wait(id)
		got := sha256.Sum256(s.log(id))
		want := sha256.Sum256(repeat(fmt.Sprintf("load-%02d", i), loadTaskBytes))
		if tk.State != tasks.Exited || tk.Exit.Code != 0 || got != want {
			t.Errorf("task %d: %s %+v, output %s", i, tk.State, tk.Exit, map[bool]string{true: "byte-exact", false: "differs"}[got == want])
		}
	}
	dtk := s.wait(dl.ID)
	var want, got []string
	for i := 1; i <= downloads; i++ {
		h := sha256.Sum256(deterministic(uint64(i), downloadBytes))
		want = append(want, hex.EncodeToString(h[:])+" "+strconv.Itoa(i))
	}
	got = strings.Fields(strings.ReplaceAll(string(s.log(dl.ID)), " ", "_"))
	for i := range got {
		got[i] = strings.ReplaceAll(got[i], "_", " ")
	}
	sort.Strings(want)
	sort.Strings(got)
	if dtk.State != tasks.Exited || strings.Join(got, "\n") != strings.Join(want, "\n") {
		bad := 0
		seen := map[string]bool{}
		for _, g := range got {
			seen[g] = true
		}
		for _, w := range want {
			if !seen[w] {
				bad++
			}
		}
		t.Errorf("downloads: %s %+v, %d of %d not byte-exact: %.400q", dtk.State, dtk.Exit, bad, downloads, s.log(dl.ID))
		ds, _ := s.client.EgressLog(t.Context())
		reasons := map[string]int{}
		for _, d := range ds {
			reasons[fmt.Sprintf("%s %s %s", d.Action, d.Reason, d.Detail)]++
		}
		t.Logf("gate decisions: %v", reasons)
		if b, err := os.ReadFile(s.status().Session.ConsoleLog); err == nil {
			t.Logf("guest console tail: %s", b[max(0, len(b)-3000):])
		}
		t.Logf("airlock serve: %s", s.stderr.String())
	}
	_, rss := mem.end()
	t.Logf("moved %d MiB of task output and %d MiB of downloads; airlock serve peak RSS %s (bound %s)",
		loadTasks*loadTaskBytes>>20, downloads*downloadBytes>>20, mib(rss), mib(serveRSSBound))
	if rss == 0 || rss > serveRSSBound {
		t.Errorf("airlock serve peak RSS %s; bound %s", mib(rss), mib(serveRSSBound))
	}
	s.works("after the load")
}
