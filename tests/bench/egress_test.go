//go:build e2e

// Package bench measures Airlock against baselines taken in the same run:
// machines here are noisy, so every figure is a ratio.
package bench

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/app/egress"
	"github.com/airlock-sandbox/airlock/app/sandbox"
	"github.com/airlock-sandbox/airlock/guest/client"
)

const downloadSize = 64 << 20

// benchEnv is one booted guest shared by every run of the benchmark (the
// testing package calls a benchmark more than once).
type benchEnv struct {
	sb   *sandbox.Sandbox
	env  []string
	port string
	stop func()
}

var (
	envOnce sync.Once
	shared  *benchEnv
	envErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if shared != nil {
		shared.stop()
	}
	os.Exit(code)
}

func egressEnv(b *testing.B) *benchEnv {
	b.Helper()
	envOnce.Do(func() { shared, envErr = bootEgressEnv() })
	if envErr != nil {
		b.Fatal(envErr)
	}
	return shared
}

func bootEgressEnv() (*benchEnv, error) {
	imageRoot := os.Getenv("AIRLOCK_IMAGE_DIR")
	if imageRoot == "" {
		return nil, fmt.Errorf("set AIRLOCK_IMAGE_DIR (make bench does)")
	}
	img, err := sandbox.LoadImage(filepath.Join(imageRoot, runtime.GOARCH))
	if err != nil {
		return nil, err
	}
	ws, err := os.MkdirTemp("", "airlock-bench-")
	if err != nil {
		return nil, err
	}
	os.Chmod(ws, 0o777)
	build := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(ws, "probe"), "../e2e/testdata/probe")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build probe: %v\n%s", err, out)
	}
	payload := make([]byte, downloadSize)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(payload) }))
	gate, err := egress.New(egress.Config{MapHosts: []string{"files.test=127.0.0.1"}})
	if err != nil {
		return nil, err
	}
	sb, err := sandbox.Start(context.Background(), sandbox.Options{Workspace: ws, Image: img, Egress: blaster{gate}})
	if err != nil {
		return nil, err
	}
	user, pass := gate.Credentials("bench")
	_, p, _ := net.SplitHostPort(srv.Listener.Addr().String())
	return &benchEnv{sb: sb, env: egress.ProxyEnv(user, pass), port: p, stop: func() {
		sb.Close(context.Background())
		gate.Close()
		srv.Close()
		os.RemoveAll(ws)
	}}, nil
}

// blaster stands in for the gate on the HTTP port: every stream the guest
// opens gets downloadSize bytes straight from the transport, no proxying.
type blaster struct{ gate *egress.Gate }

func (b blaster) ServeHTTPProxy(l net.Listener) error {
	buf := make([]byte, 256<<10)
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		go func() {
			defer c.Close()
			for left := downloadSize; left > 0; left -= len(buf) {
				if _, err := c.Write(buf[:min(left, len(buf))]); err != nil {
					return
				}
			}
		}()
	}
}

func (b blaster) ServeSOCKS(l net.Listener) error { return b.gate.ServeSOCKS(l) }

// BenchmarkEgressIntoGuest prints download throughput into the guest
// through the gate (SOCKS5 to a loopback HTTP server) as a ratio of the raw
// transport's throughput (the same guest forwarder, no gate), both measured
// by the same program in the same VM, alternating.
func BenchmarkEgressIntoGuest(b *testing.B) {
	e := egressEnv(b)
	run := func(cmd string) float64 {
		var out strings.Builder
		exit, err := e.sb.Agent().Exec(context.Background(), client.Spec{Argv: []string{"sh", "-c", cmd}, Env: e.env}, client.Stdio{Stdout: &out})
		if err != nil || exit.Code != 0 {
			b.Fatalf("%s: %+v %v %q", cmd, exit, err, out.String())
		}
		var secs float64
		for _, f := range strings.Fields(out.String()) {
			if v, ok := strings.CutPrefix(f, "secs="); ok {
				fmt.Sscan(v, &secs)
			}
		}
		return secs
	}
	p := e.port
	var raw, gated time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		raw += time.Duration(run("/workspace/probe drain "+egress.GuestHTTPProxy) * float64(time.Second))
		gated += time.Duration(run("/workspace/probe socks http://files.test:"+p+"/") * float64(time.Second))
	}
	mib := float64(downloadSize*b.N) / (1 << 20)
	rawRate, gateRate := mib/raw.Seconds(), mib/gated.Seconds()
	b.ReportMetric(rawRate, "raw-MiB/s")
	b.ReportMetric(gateRate, "gate-MiB/s")
	b.ReportMetric(gateRate/rawRate, "gate/raw")
	fmt.Printf("egress into the guest: raw transport %.1f MiB/s, through the gate %.1f MiB/s, ratio %.2f\n", rawRate, gateRate, gateRate/rawRate)
}
