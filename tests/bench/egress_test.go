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
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/app/egress"
	"github.com/airlock-sandbox/airlock/app/sandbox"
	"github.com/airlock-sandbox/airlock/guest/client"
)

const downloadSize = 64 << 20

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
	imageRoot := os.Getenv("AIRLOCK_IMAGE_DIR")
	if imageRoot == "" {
		b.Skip("set AIRLOCK_IMAGE_DIR (make bench does)")
	}
	img, err := sandbox.LoadImage(filepath.Join(imageRoot, runtime.GOARCH))
	if err != nil {
		b.Fatal(err)
	}
	ws := b.TempDir()
	os.Chmod(ws, 0o777)
	build := exec.Command("go", "build", "-trimpath", "-o", filepath.Join(ws, "probe"), "../e2e/testdata/probe")
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("build probe: %v\n%s", err, out)
	}
	payload := make([]byte, downloadSize)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(payload) }))
	defer srv.Close()
	gate, err := egress.New(egress.Config{MapHosts: []string{"files.test=127.0.0.1"}})
	if err != nil {
		b.Fatal(err)
	}
	defer gate.Close()
	ctx := context.Background()
	sb, err := sandbox.Start(ctx, sandbox.Options{Workspace: ws, Image: img, Egress: blaster{gate}})
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Close(ctx)
	user, pass := gate.Credentials("bench")
	env := egress.ProxyEnv(user, pass)
	_, p, _ := net.SplitHostPort(srv.Listener.Addr().String())
	run := func(cmd string) float64 {
		var out strings.Builder
		exit, err := sb.Agent().Exec(ctx, client.Spec{Argv: []string{"sh", "-c", cmd}, Env: env}, client.Stdio{Stdout: &out})
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
