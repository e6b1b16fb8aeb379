//go:build e2e

package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/app/egress"
	"github.com/airlock-sandbox/airlock/app/sandbox"
	"github.com/airlock-sandbox/airlock/app/workspace"
	"github.com/airlock-sandbox/airlock/guest/api/egresswire"
	"github.com/airlock-sandbox/airlock/guest/client"
	"github.com/airlock-sandbox/airlock/tests/internal/vmharness"
	"github.com/airlock-sandbox/airlock/vm"
	"github.com/airlock-sandbox/airlock/vm/qemu"
)

const (
	streamSize = 32 << 20 // stdout, raw transport and egress transfers
	fileMiB    = 32       // workspace read and write
	metaFiles  = 1000     // small-file metadata operations
)

// ownedByTaskUser makes dir belong to uid 1000 when running as root, as a
// user's own folder would, and returns its canonical path.
func ownedByTaskUser(dir string) string {
	if os.Getuid() == 0 {
		_ = os.Chown(dir, 1000, 1000)
	}
	if canon, err := filepath.EvalSymlinks(dir); err == nil {
		return canon
	}
	return dir
}

func (h *harness) guestPhases() {
	ctx := context.Background()
	ws := filepath.Join(h.work, "ws")
	os.Mkdir(ws, 0o755)
	ws = ownedByTaskUser(ws)
	uid, gid := workspace.Owner(ws)

	floorBin := filepath.Join(h.work, "floorinit")
	for pkg, dst := range map[string]string{
		"./testdata/floorinit": floorBin,
		"./testdata/gprobe":    filepath.Join(ws, "gprobe"),
		vmharness.ProbeDir():   filepath.Join(ws, "probe"),
	} {
		if err := buildGuest(pkg, dst); err != nil {
			h.b.Fatal(err)
		}
	}
	agentInitrd := filepath.Join(h.imageDir, "initramfs.cpio")
	floorInitrd := filepath.Join(h.work, "floor.cpio")
	if err := floorInitramfs(agentInitrd, floorBin, floorInitrd); err != nil {
		h.b.Fatal(err)
	}

	// Boot to ready, alternating agent and floor in the same VM config,
	// and a whole `airlock run -- true` beside them (ephemeralRun).
	// Three times the rounds of the other rows: a boot swings by ±15 %
	// from one to the next under TCG, as much as the target allows.
	//
	// And the product's start (vm/qemu template.go): the first machine of
	// a shape boots to park, saves its template and goes on (a fresh
	// cache a round, so each round pays it); the next one starts from
	// that template. `airlock run -- true` both ways: from its template
	// (the default), and with templates off.
	var agentMS, floorMS, agentUp, floorUp, firstMS, tmplMS, runMS, runBootMS []float64
	runTrue := h.ephemeralRun(ws, "")
	runBoot := h.ephemeralRun(ws, qemu.TemplatesOff)
	for i := range 3 * h.rounds {
		if runTrue != nil && runBoot != nil {
			// Which goes first alternates: the second of a pair runs on
			// a warmer host.
			if i%2 == 0 {
				runMS, runBootMS = append(runMS, runTrue(fmt.Sprint(i))), append(runBootMS, runBoot(fmt.Sprint(i)))
			} else {
				runBootMS, runMS = append(runBootMS, runBoot(fmt.Sprint(i))), append(runMS, runTrue(fmt.Sprint(i)))
			}
		}
		a, err := boot(ctx, h.machineConfig(fmt.Sprintf("agent-%d", i), agentInitrd, ws, uid, gid), qemu.Options{})
		if err != nil {
			h.b.Fatalf("boot the agent image: %v", err)
		}
		a.m.Stop(ctx)
		f, err := boot(ctx, h.machineConfig(fmt.Sprintf("floor-%d", i), floorInitrd, ws, uid, gid), qemu.Options{})
		if err != nil {
			h.b.Fatalf("boot the floor image: %v", err)
		}
		f.m.Stop(ctx)
		cache := qemu.Options{CacheDir: filepath.Join(h.work, fmt.Sprintf("templates-%d", i)), Templates: qemu.TemplatesAuto}
		first, err := boot(ctx, h.machineConfig(fmt.Sprintf("first-%d", i), agentInitrd, ws, uid, gid), cache)
		if err != nil {
			h.b.Fatalf("boot the agent image and save its template: %v", err)
		}
		first.m.Stop(ctx)
		tm, err := boot(ctx, h.machineConfig(fmt.Sprintf("tmpl-%d", i), agentInitrd, ws, uid, gid), cache)
		if err != nil {
			h.b.Fatalf("start the agent image from its template: %v", err)
		}
		tm.m.Stop(ctx)
		if vm.Restored(first.m) || !vm.Restored(tm.m) {
			h.b.Fatalf("round %d: the first machine restored %v, the second %v", i, vm.Restored(first.m), vm.Restored(tm.m))
		}
		agentMS, floorMS = append(agentMS, ms(a.elapsed)), append(floorMS, ms(f.elapsed))
		agentUp, floorUp = append(agentUp, float64(a.ready.BootMillis)), append(floorUp, float64(f.ready.BootMillis))
		firstMS, tmplMS = append(firstMS, ms(first.elapsed)), append(tmplMS, ms(tm.elapsed))
		h.logf("boot %d: agent %v (guest %d ms), floor %v (guest %d ms), first of a shape %v, from its template %v", i,
			a.elapsed.Round(time.Millisecond), a.ready.BootMillis, f.elapsed.Round(time.Millisecond), f.ready.BootMillis,
			first.elapsed.Round(time.Millisecond), tm.elapsed.Round(time.Millisecond))
	}
	h.t.add("boot-ready", "boot to ready: agent image", "ms", agentMS, "trivial init", floorMS, atMost(1.10))
	h.t.add("boot-guest-uptime", "  guest uptime at ready: agent", "ms", agentUp, "trivial init", floorUp, atMost(1.10))
	h.t.add("start-template", "start to ready from a template: agent image", "ms", tmplMS, "trivial init's boot", floorMS, nil).Note =
		"what every machine but the first of its shape does: QEMU loads the parked guest's saved state, the guest is woken"
	h.t.add("start-template-boot", "  the same", "ms", tmplMS, "agent image's boot", agentMS, nil)
	h.t.add("start-first", "first start of a shape: boot, park, save", "ms", firstMS, "agent image's boot", agentMS, nil).Note =
		"a boot that parks, saves its template (60-70 MB) and goes on: paid once per image, QEMU and machine shape"
	if runMS != nil {
		h.t.add("run-true", "`airlock run -- true`, start to exit", "ms", runMS, "the same, templates off", runBootMS, nil).Note =
			"the host's work before QEMU starts, the start, the task and the power-off"
		h.t.add("run-true-boot", "  the same, templates off", "ms", runBootMS, "agent image's boot to ready", agentMS, nil)
	}

	// The shared folder as the default serves it (9p, as the folder's
	// owner), egress through the gate.
	payload := make([]byte, streamSize)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(payload) }))
	defer srv.Close()
	gate, err := egress.New(egress.Config{Allow: []string{"files.test"}, MapHosts: []string{"files.test=127.0.0.1"}})
	if err != nil {
		h.b.Fatal(err)
	}
	defer gate.Close()
	img, err := sandbox.LoadImage(h.imageDir)
	if err != nil {
		h.b.Fatal(err)
	}
	// sandbox.Start, one boot a round with no other VM up (one boot alone
	// swung 0.85-1.25 of the floor); the last one's sandbox serves the
	// rows below.
	var sb *sandbox.Sandbox
	var sbTotal, sbReady, sbAfter []float64
	for i := range h.rounds {
		start := time.Now()
		s, err := sandbox.Start(ctx, sandbox.Options{Workspace: ws, Image: img, UID: uid, GID: gid, Egress: blaster{gate}, NewMachine: bootOnly})
		if err != nil {
			h.b.Fatal(err)
		}
		total := time.Since(start)
		sbTotal, sbReady, sbAfter = append(sbTotal, ms(total)), append(sbReady, ms(s.BootTime())), append(sbAfter, ms(total-s.BootTime()))
		if i < h.rounds-1 {
			s.Close(ctx)
		} else {
			sb = s
		}
	}
	h.t.add("boot-sandbox", "  sandbox.Start (ready, SetTime)", "ms", sbTotal, "trivial init", floorMS, atMost(1.10)).Note =
		"a boot a round, after the boot rounds, with no other VM up"
	h.t.add("boot-sandbox-ready", "    of which its boot to ready", "ms", sbReady, "trivial init", floorMS, nil)
	h.t.add("boot-sandbox-after", "    of which after ready (SetTime)", "ms", sbAfter, "", nil, nil)

	// The trivial init that the rows below use as their raw transport,
	// booted after sandbox.Start so that the one-boot row above has the
	// machine to itself.
	f, err := boot(ctx, h.machineConfig("floor-kept", floorInitrd, ws, uid, gid), qemu.Options{})
	if err != nil {
		h.b.Fatalf("boot the floor image: %v", err)
	}
	h.floor = &floorVM{booted: f}
	h.accel = f.m.Info().Accelerator
	h.cleanups = append(h.cleanups, func() { f.m.Stop(context.Background()) })
	kind := sb.Machine().Info().Share
	h.logf("sandbox (%s) up: %+v", kind, sb.Machine().Info())
	g := &guest{h: h, sb: sb}
	// The round trips are also the service's baseline.
	if want("rtt") || want("service") {
		g.roundTrips()
	}
	if want("stdout") || want("service") {
		g.stdout()
	}
	if want("egress") {
		user, pass := gate.Credentials("bench")
		_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
		g.egress(egress.ProxyEnv(user, pass), port)
	}
	if want("memory") {
		g.memory()
	}
	// After the idle RSS: the load leaves the agent bigger.
	if want("memory") {
		g.load()
		r := g.probe("rss")
		g.h.t.add("rss-agent-load", "  after 16 tasks streamed 4 MiB each at once", "MiB", []float64{r["init_kib"] / 1024}, "trivial Go mux init", []float64{g.h.floor.rssKiB(g.h.b) / 1024}, nil).Note =
			"the Go heap the load grew is given back to the kernel over minutes, not at once"
	}
	if want("fs") {
		g.fs(kind, ws)
	}
	if want("service") {
		h.direct = g // the service phase's baseline, idle until then
		h.cleanups = append(h.cleanups, func() { sb.Close(context.Background()) })
	} else {
		sb.Close(ctx)
	}
	if !want("fs") {
		return
	}

	// The same folder over the other file system. As root the default is
	// 9p, and virtiofs (which the product refuses as root: virtiofsd
	// applies the guest's owners and modes to the host as they are) is
	// measured with TrustedVirtiofs: the guest and the folder are the
	// benchmark's own.
	other := qemu.Options{Share: qemu.Share9P}
	if kind == qemu.Share9P {
		if os.Geteuid() != 0 {
			h.logf("virtiofs not measured: virtiofsd runs only as root")
			return
		}
		other = qemu.Options{Share: qemu.ShareVirtiofs, TrustedVirtiofs: true}
	}
	sb2, err := sandbox.Start(ctx, sandbox.Options{Workspace: ws, Image: img, UID: uid, GID: gid,
		NewMachine: func(cfg vm.Config) (vm.Machine, error) { return qemu.New(cfg, other) }})
	if err != nil {
		h.b.Fatal(err)
	}
	defer sb2.Close(ctx)
	kind2 := sb2.Machine().Info().Share
	h.logf("sandbox (%s) up: %+v", kind2, sb2.Machine().Info())
	if kind2 == kind {
		h.logf("%s not measured: the share fell back to %s (see the log above)", other.Share, kind2)
		return
	}
	(&guest{h: h, sb: sb2}).fs(kind2, ws)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// guest measures through one sandbox's agent.
type guest struct {
	h  *harness
	sb *sandbox.Sandbox
}

// run runs argv in the guest and returns its stdout; a failure is fatal.
func (g *guest) run(env []string, argv ...string) string {
	var out, errb strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	exit, err := g.sb.Agent().Exec(ctx, client.Spec{Argv: argv, Env: env}, client.Stdio{Stdout: &out, Stderr: &errb})
	if err != nil || exit.Code != 0 {
		g.h.b.Fatalf("%q: %+v %v\nstdout %q\nstderr %q", argv, exit, err, out.String(), errb.String())
	}
	return out.String()
}

// probe runs gprobe and decodes its JSON answer.
func (g *guest) probe(args ...string) map[string]float64 {
	out := g.run(nil, append([]string{"/workspace/gprobe"}, args...)...)
	var m map[string]any
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		g.h.b.Fatalf("gprobe %v: %q: %v", args, out, err)
	}
	f := map[string]float64{}
	for k, v := range m {
		if x, ok := v.(float64); ok {
			f[k] = x
		}
	}
	return f
}

func medianOf(n int, f func() time.Duration) float64 {
	ts := make([]float64, n)
	for i := range ts {
		ts[i] = us(f())
	}
	return median(ts)
}

// roundTrips: a task running `true`, and the agent's Info RPC, against the
// transport's own echo round trip (the floor guest), alternating.
func (g *guest) roundTrips() {
	ctx := context.Background()
	a := g.sb.Agent()
	var echo, tru, info, inGuest, spawn []float64
	for range g.h.rounds {
		spawn = append(spawn, g.probe("spawn", "/bin/true", "20")["us"])
		echo = append(echo, g.h.floor.echoRTT(g.h.b, 200))
		tru = append(tru, medianOf(20, func() time.Duration {
			start := time.Now()
			exit, err := a.Exec(ctx, client.Spec{Argv: []string{"true"}}, client.Stdio{})
			if err != nil || exit.Code != 0 {
				g.h.b.Fatalf("true: %+v %v", exit, err)
			}
			inGuest = append(inGuest, us(exit.Duration))
			return time.Since(start)
		}))
		info = append(info, medianOf(50, func() time.Duration {
			start := time.Now()
			if _, err := a.Info(ctx); err != nil {
				g.h.b.Fatal(err)
			}
			return time.Since(start)
		}))
	}
	g.h.echoRTT = echo
	g.h.t.add("rtt-exec-true", "task round trip `true` (agent Exec)", "µs", tru, "transport echo RTT", echo, atMost(3))
	g.h.t.add("rtt-exec-true-guest", "  of which the task's run time (guest clock)", "µs", []float64{median(inGuest)}, "transport echo RTT", echo, nil)
	g.h.t.add("rtt-info", "  agent Info RPC round trip", "µs", info, "transport echo RTT", echo, nil)
	g.h.t.add("rtt-bare-spawn", "  a bare fork+exec+wait of `true` in the guest", "µs", spawn, "transport echo RTT", echo, nil).Note =
		"the floor under the task round trip: what starting a process costs the guest itself (gprobe spawn, syscall.ForkExec)"
}

// load runs the service phase's load on the agent directly: 16 tasks
// streaming stdout at once (its baseline). It returns the aggregate MiB/s.
func (g *guest) load() float64 {
	return loadRate(func(int) {
		var cw countWriter
		exit, err := g.sb.Agent().Exec(context.Background(), client.Spec{Shell: loadTask}, client.Stdio{Stdout: &cw})
		if err != nil || exit.Code != 0 || cw.n != loadTaskSize {
			g.h.b.Errorf("load task: %+v %v, %d bytes", exit, err, cw.n)
		}
	})
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

// stdout: a guest task writing to stdout against the raw transport in the
// same direction (guest to host), alternating.
func (g *guest) stdout() {
	var raw, task, pipe, dd, ddSw []float64
	for range g.h.rounds {
		raw = append(raw, g.h.floor.source(g.h.b, streamSize))
		start := time.Now()
		g.run(nil, "sh", "-c", fmt.Sprintf("head -c %d /dev/zero | cat >/dev/null", streamSize))
		pipe = append(pipe, mibps(streamSize, time.Since(start)))
		var cw countWriter
		start = time.Now()
		exit, err := g.sb.Agent().Exec(context.Background(), client.Spec{Argv: []string{"head", "-c", strconv.Itoa(streamSize), "/dev/zero"}}, client.Stdio{Stdout: &cw})
		if err != nil || exit.Code != 0 || cw.n != streamSize {
			g.h.b.Fatalf("head: %+v %v, %d bytes", exit, err, cw.n)
		}
		task = append(task, mibps(streamSize, time.Since(start)))
		// busybox head writes small blocks; dd bs=1M shows the agent's path alone.
		cw = countWriter{}
		before := g.switches()
		start = time.Now()
		exit, err = g.sb.Agent().Exec(context.Background(), client.Spec{Argv: []string{"dd", "if=/dev/zero", "bs=1048576", "count=" + strconv.Itoa(streamSize>>20)}}, client.Stdio{Stdout: &cw})
		if err != nil || exit.Code != 0 || cw.n != streamSize {
			g.h.b.Fatalf("dd: %+v %v, %d bytes", exit, err, cw.n)
		}
		dd = append(dd, mibps(streamSize, time.Since(start)))
		ddSw = append(ddSw, g.switchesPerMiB(before))
	}
	g.h.rawSource = raw
	g.h.t.add("stdout", "stdout of a guest task (head -c 32M)", "MiB/s", task, "raw transport guest→host", raw, atLeast(0.8))
	g.h.t.add("stdout-dd", "  stdout of dd bs=1M (large writes)", "MiB/s", dd, "raw transport guest→host", raw, atLeast(0.8))
	g.h.t.add("stdout-guest-pipe", "  head -c 32M | cat inside the guest", "MiB/s", pipe, "raw transport guest→host", raw, nil)
	g.h.t.add("stdout-dd-switches", "  guest context switches per MiB, dd stdout", "/MiB", ddSw, "", nil, nil).Note =
		"a diagnostic: counts guest scheduler work, which the machine's load sways less than a rate"
}

// egress: a download into the guest through the gate (SOCKS5 to a loopback
// HTTP server) against the raw transport in the same direction (the guest's
// forwarder, no gate), alternating, timed in the guest by the probes. Both
// discard what they read (hashing it would measure the guest's CPU).
func (g *guest) egress(env []string, port string) {
	secs := func(cmd string) float64 {
		out := g.run(env, "sh", "-c", cmd)
		for _, f := range strings.Fields(out) {
			if v, ok := strings.CutPrefix(f, "secs="); ok {
				s, _ := strconv.ParseFloat(v, 64)
				return s
			}
		}
		g.h.b.Fatalf("%s: no secs= in %q", cmd, out)
		return 0
	}
	var raw, gated, rawSw, gatedSw, stdin []float64
	input := make([]byte, streamSize)
	for range g.h.rounds {
		before := g.switches()
		raw = append(raw, float64(streamSize)/(1<<20)/secs("/workspace/probe drain "+egress.GuestHTTPProxy))
		rawSw = append(rawSw, g.switchesPerMiB(before))
		before = g.switches()
		gated = append(gated, float64(streamSize)/(1<<20)/secs("/workspace/gprobe socks http://files.test:"+port+"/"))
		gatedSw = append(gatedSw, g.switchesPerMiB(before))
		start := time.Now()
		exit, err := g.sb.Agent().Exec(context.Background(), client.Spec{Argv: []string{"dd", "of=/dev/null", "bs=1048576"}}, client.Stdio{Stdin: bytes.NewReader(input)})
		if err != nil || exit.Code != 0 {
			g.h.b.Fatalf("dd of=/dev/null: %+v %v", exit, err)
		}
		stdin = append(stdin, mibps(streamSize, time.Since(start)))
	}
	g.h.t.add("egress-guest", "egress download into the guest via the gate", "MiB/s", gated, "raw transport host→guest", raw, atLeast(0.8))
	g.h.t.add("stdin-dd", "stdin of a guest task (dd of=/dev/null bs=1M)", "MiB/s", stdin, "raw transport host→guest", raw, nil).Note =
		"the task's start and exit included (~1 % of it); stdin goes as ExecRequest messages, not raw frames"
	g.h.t.add("egress-guest-switches", "  guest context switches per MiB, egress", "/MiB", gatedSw, "raw transport host→guest", rawSw, nil).Note =
		"a diagnostic: counts guest scheduler work, which the machine's load sways less than a rate"
}

// switches is the guest's count of context switches since boot.
func (g *guest) switches() float64 {
	for _, l := range strings.Split(g.run(nil, "cat", "/proc/stat"), "\n") {
		if v, ok := strings.CutPrefix(l, "ctxt "); ok {
			n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err == nil {
				return n
			}
		}
	}
	g.h.b.Fatal("no ctxt in the guest's /proc/stat")
	return 0
}

// switchesPerMiB is the guest's context switches since before, per MiB of
// a streamSize transfer (reading the count is a task too: a small constant).
func (g *guest) switchesPerMiB(before float64) float64 {
	return (g.switches() - before) / (streamSize >> 20)
}

// memory: PID 1's RSS, init with the agent in it, against the floor
// init's (a minimal Go program serving the mux), after the transfers
// above; the guest binary.
func (g *guest) memory() {
	r := g.probe("rss")
	floor := g.h.floor.rssKiB(g.h.b) / 1024
	g.h.t.add("rss-agent", "memory: guest init with the agent (PID 1) RSS", "MiB", []float64{r["init_kib"] / 1024}, "trivial Go mux init", []float64{floor}, nil)
	size, _ := strconv.ParseFloat(strings.TrimSpace(g.run(nil, "stat", "-c", "%s", "/init")), 64)
	// At rest: the host CPU the agent's VM takes against the trivial
	// init's, over the same windows (both idle, after a second to settle).
	// No monitor checks this agent; the service phase's row has them.
	time.Sleep(time.Second)
	var agentIdle, floorIdle []float64
	for range g.h.rounds {
		p := idleCPU(3*time.Second, []int{g.sb.Machine().Info().PID}, []int{g.h.floor.m.Info().PID})
		agentIdle, floorIdle = append(agentIdle, p[0]), append(floorIdle, p[1])
	}
	g.h.t.add("idle-cpu-agent", "idle: host CPU of the agent's VM", "% core", agentIdle, "the trivial init's VM, same windows", floorIdle, nil)
	g.h.t.add("size-guest", "size: guest binary (/init)", "MiB", []float64{size / (1 << 20)}, "trivial Go mux init", []float64{fileSizeMiB(filepath.Join(g.h.work, "floorinit"))}, nil)
}

// fs: the shared folder against the guest's own tmpfs, alternating.
// Reads take a file the host just wrote (not in the guest's cache).
func (g *guest) fs(kind, ws string) {
	var wW, wT, rW, rT, r4W, r4T []float64
	meta := map[string][2][]float64{}
	block := make([]byte, 1<<20)
	for i := range block {
		block[i] = byte(i * 7)
	}
	for i := range g.h.rounds {
		w := g.probe("write", fmt.Sprintf("/workspace/w%d.bin", i), strconv.Itoa(fileMiB))
		t := g.probe("write", fmt.Sprintf("/tmp/w%d.bin", i), strconv.Itoa(fileMiB))
		wW, wT = append(wW, w["bytes"]/(1<<20)/w["secs"]), append(wT, t["bytes"]/(1<<20)/t["secs"])

		host := filepath.Join(ws, fmt.Sprintf("r%d.bin", i))
		f, err := os.Create(host)
		if err != nil {
			g.h.b.Fatal(err)
		}
		for range fileMiB {
			f.Write(block)
		}
		f.Close()
		os.Chown(host, 1000, 1000)
		w = g.probe("read", fmt.Sprintf("/workspace/r%d.bin", i))
		t = g.probe("read", fmt.Sprintf("/tmp/w%d.bin", i))
		rW, rT = append(rW, w["bytes"]/(1<<20)/w["secs"]), append(rT, t["bytes"]/(1<<20)/t["secs"])
		if i == 0 { // one round: 4 KiB reads (cat, most tools) are one 9p request each
			w = g.probe("read", fmt.Sprintf("/workspace/r%d.bin", i), "4096")
			t = g.probe("read", fmt.Sprintf("/tmp/w%d.bin", i), "4096")
			r4W, r4T = append(r4W, w["bytes"]/(1<<20)/w["secs"]), append(r4T, t["bytes"]/(1<<20)/t["secs"])
		}

		if i == 0 { // one round: 9p takes about a minute for these
			w = g.probe("meta", "/workspace/meta", strconv.Itoa(metaFiles))
			t = g.probe("meta", "/tmp/meta", strconv.Itoa(metaFiles))
			for _, op := range []string{"create", "stat", "unlink"} {
				m := meta[op]
				m[0] = append(m[0], float64(metaFiles)/w[op+"_secs"])
				m[1] = append(m[1], float64(metaFiles)/t[op+"_secs"])
				meta[op] = m
			}
		}
		g.run(nil, "rm", "-f", fmt.Sprintf("/tmp/w%d.bin", i), fmt.Sprintf("/workspace/w%d.bin", i))
		os.Remove(host)
	}
	g.h.t.add("ws-write-"+kind, fmt.Sprintf("workspace write 32M+fsync (%s)", kind), "MiB/s", wW, "guest tmpfs", wT, nil)
	g.h.t.add("ws-read-"+kind, fmt.Sprintf("workspace read 32M in 1M reads, cold (%s)", kind), "MiB/s", rW, "guest tmpfs", rT, nil)
	g.h.t.add("ws-read4k-"+kind, fmt.Sprintf("workspace read 32M in 4K reads, cold (%s)", kind), "MiB/s", r4W, "guest tmpfs", r4T, nil)
	for _, op := range []string{"create", "stat", "unlink"} {
		g.h.t.add("ws-"+op+"-"+kind, fmt.Sprintf("workspace %s ×%d (%s)", op, metaFiles, kind), "op/s", meta[op][0], "guest tmpfs", meta[op][1], nil)
	}
}

// blaster stands in for the gate on the HTTP port: every stream the guest
// opens gets streamSize bytes straight from the transport, no proxying, in
// the records the guest's forwarder reads (guest/api/egresswire), as the
// gate sends them.
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
			fc := egresswire.FramedServer(c)
			for left := streamSize; left > 0; left -= len(buf) {
				if _, err := fc.Write(buf[:min(left, len(buf))]); err != nil {
					return
				}
			}
			fc.CloseWrite()
		}()
	}
}

func (b blaster) ServeSOCKS(l net.Listener) error { return b.gate.ServeSOCKS(l) }

// bootOnly is the product's machine with templates off: the sandbox.Start
// rows compare booting the agent with booting the trivial init.
func bootOnly(cfg vm.Config) (vm.Machine, error) {
	return qemu.New(cfg, qemu.Options{Templates: qemu.TemplatesOff})
}

// ephemeralRun returns a function that times what a user of `airlock run`
// waits for: the program's start to its exit for `true` (its own work
// before QEMU starts, the boot, the task, the power-off). It makes one
// uncounted run first, as a user's second run finds the image's digests
// remembered and the accelerator's verdict cached; nil if that fails.
func (h *harness) ephemeralRun(ws, templates string) func(name string) float64 {
	run := func(name string) (time.Duration, error) {
		cmd := exec.Command(airlockBin(), "run", "--ephemeral", "--image-dir", h.imageDir, "-w", ws,
			"--console-log", filepath.Join(h.work, "run-"+templates+name+".log"), "--", "true")
		cmd.Env = append(os.Environ(), "XDG_CACHE_HOME="+filepath.Join(h.work, "run-cache"), qemu.EnvTemplates+"="+templates)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		start := time.Now()
		if err := cmd.Run(); err != nil {
			return 0, fmt.Errorf("%v: %s", err, stderr.String())
		}
		return time.Since(start), nil
	}
	if _, err := run("warm"); err != nil {
		h.logf("skip airlock run: %v", err)
		return nil
	}
	return func(name string) float64 {
		d, err := run(name)
		if err != nil {
			h.b.Fatalf("airlock run -- true: %v", err)
		}
		return ms(d)
	}
}
