//go:build e2e

package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/app/api"
	"github.com/airlock-sandbox/airlock/app/service"
	"github.com/airlock-sandbox/airlock/app/session"
	"github.com/airlock-sandbox/airlock/app/tasks"
)

const (
	loadTasks    = 16
	loadTaskSize = 4 << 20
)

// loadTask is one of the load's tasks: loadTaskSize bytes of stdout in
// 1 MiB writes, through a shell as the service's tasks usually are.
var loadTask = fmt.Sprintf("dd if=/dev/zero bs=1048576 count=%d 2>/dev/null", loadTaskSize>>20)

// loadRate runs task(i) for the load's tasks at once and returns their
// aggregate stdout in MiB/s.
func loadRate(task func(i int)) float64 {
	start := time.Now()
	var wg sync.WaitGroup
	for i := range loadTasks {
		wg.Go(func() { task(i) })
	}
	wg.Wait()
	return mibps(loadTasks*loadTaskSize, time.Since(start))
}

// service runs `airlock serve` with its own folders: RSS idle (before and
// after its VM boots) and while 16 tasks stream output, and a task round
// trip through the control API against the transport's echo.
func (h *harness) service() {
	root := filepath.Join(h.work, "serve")
	ws := filepath.Join(root, "ws")
	os.MkdirAll(ws, 0o755)
	ws = ownedByTaskUser(ws)
	env := append(os.Environ(),
		"AIRLOCK_IMAGE_DIR="+h.imageDir,
		"XDG_RUNTIME_DIR="+filepath.Join(root, "run"),
		"XDG_CONFIG_HOME="+filepath.Join(root, "config"),
		"XDG_STATE_HOME="+filepath.Join(root, "state"),
		"XDG_CACHE_HOME="+filepath.Join(root, "cache"))
	cmd := exec.Command(airlockBin(), "serve")
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		h.b.Fatalf("airlock serve: %v", err)
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cmd.Process.Signal(syscall.SIGINT)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}
	defer stop()
	pid := cmd.Process.Pid
	c := api.NewClient(filepath.Join(root, "run", "airlock", "airlock.sock"))
	ctx := context.Background()
	for i := 0; c.Ping(ctx) != nil; i++ {
		if i > 200 {
			h.b.Fatalf("airlock serve did not answer: %s", stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	settle := func() float64 {
		time.Sleep(2 * time.Second)
		var xs []float64
		for range 5 {
			xs = append(xs, vmRSS(pid)/1024)
			time.Sleep(200 * time.Millisecond)
		}
		return median(xs)
	}
	idleNoVM := settle()
	bootStart := time.Now()
	if err := c.SetWorkspace(ctx, ws, false, ""); err != nil {
		h.b.Fatalf("workspace set: %v\n%s", err, stderr.String())
	}
	for {
		st, err := c.Status(ctx)
		if err != nil {
			h.b.Fatal(err)
		}
		if st.Session.State == "running" {
			break
		}
		if time.Since(bootStart) > 3*time.Minute {
			h.b.Fatalf("service VM not running: %+v\n%s", st.Session, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	h.logf("service VM running after %v", time.Since(bootStart).Round(time.Millisecond))
	runWait := func(req service.RunRequest) tasks.Task {
		tk, err := c.Run(ctx, req)
		if err != nil {
			h.b.Fatalf("run: %v", err)
		}
		tk, err = c.Wait(ctx, tk.ID)
		if err != nil || tk.State != tasks.Exited || tk.Exit.Code != 0 {
			h.b.Fatalf("task %+v: %v", tk, err)
		}
		return tk
	}
	runWait(service.RunRequest{Argv: []string{"true"}}) // warm
	idleVM := settle()
	// At rest, health checks and all: `airlock serve` and its VM against
	// the trivial init's VM over the same windows, each one health-check
	// interval long (so each holds one check).
	st, err := c.Status(ctx)
	if err != nil || st.Session.PID == 0 {
		h.b.Fatalf("status: %+v %v", st.Session, err)
	}
	var svcIdle, floorIdle []float64
	for range h.rounds {
		p := idleCPU(session.DefaultHealthInterval, []int{pid, st.Session.PID}, []int{h.floor.m.Info().PID})
		svcIdle, floorIdle = append(svcIdle, p[0]), append(floorIdle, p[1])
	}

	var echo, tru []float64
	for range h.rounds {
		echo = append(echo, h.floor.echoRTT(h.b, 200))
		tru = append(tru, medianOf(10, func() time.Duration {
			start := time.Now()
			runWait(service.RunRequest{Argv: []string{"true"}})
			return time.Since(start)
		}))
	}
	h.t.add("rtt-service-true", "task round trip `true` (warm service API)", "µs", tru, "transport echo RTT", echo, atMost(3))

	// Load: 16 tasks streaming output at once; sample RSS meanwhile. dd
	// writes 1 MiB blocks: busybox's `yes | head -c` writes small ones and
	// is itself the limit (the same pipeline runs no faster inside the
	// guest), so it would measure busybox rather than the service. Against the
	// same 16 tasks on the bench's own sandbox directly (h.direct, kept up
	// by guestPhases), round by round: what the service's own path — the
	// control API, the task store, its logs — costs under concurrency.
	var peak float64
	done := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				peak = max(peak, vmRSS(pid)/1024)
			}
		}
	})
	var rates, direct []float64
	viaService := func() {
		rates = append(rates, loadRate(func(i int) {
			tk := runWait(service.RunRequest{Shell: fmt.Sprintf(loadTask+" # %02d", i)})
			if tk.Output.Stdout != loadTaskSize {
				h.b.Errorf("load task %d logged %d bytes, want %d", i, tk.Output.Stdout, loadTaskSize)
			}
		}))
	}
	for i := range h.rounds {
		// Alternating with the same tasks on the bench's own sandbox,
		// both ways round: two loads minutes apart swung 0.55-1.14.
		if i%2 == 0 {
			viaService()
			direct = append(direct, h.direct.load())
		} else {
			direct = append(direct, h.direct.load())
			viaService()
		}
	}
	close(done)
	sampler.Wait()
	h.t.add("rss-host-idle-novm", "memory: host service RSS idle, no VM", "MiB", []float64{idleNoVM}, "", nil, &Target{Max: true, Limit: 40, OfValue: true})
	h.t.add("rss-host-idle", "memory: host service RSS idle, VM up", "MiB", []float64{idleVM}, "", nil, &Target{Max: true, Limit: 40, OfValue: true})
	h.t.add("idle-cpu-service", "idle: host CPU of the service (serve + its VM)", "% core", svcIdle, "the trivial init's VM, same windows", floorIdle, nil)
	h.t.add("rss-host-load", "memory: host service RSS peak, 16 tasks stream", "MiB", []float64{peak}, "idle, VM up", []float64{idleVM}, nil)
	h.t.add("service-stdout-16", "  16 tasks × 4M stdout (dd) via service, aggregate", "MiB/s", rates, "the same tasks on the agent", direct, atLeast(0.8))
	stop()
}
