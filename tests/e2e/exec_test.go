//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	agentv1 "github.com/airlock-sandbox/airlock/guest/api/agent/v1"
	"github.com/airlock-sandbox/airlock/guest/client"
	"github.com/airlock-sandbox/airlock/tests/internal/vmharness"
	"github.com/airlock-sandbox/airlock/vm/qemu"
)

func TestExitCodes(t *testing.T) {
	tests := []struct {
		cmd       string
		code, sig int
		shellCode int
	}{
		{"true", 0, 0, 0},
		{"exit 3", 3, 0, 3},
		{"exit 255", 255, 0, 255},
		{"kill -TERM $$", 0, 15, 143},
		{"kill -KILL $$", 0, 9, 137},
	}
	for _, tt := range tests {
		t.Run(tt.cmd, func(t *testing.T) {
			r := sh(t, shell(tt.cmd), nil)
			if r.Exit.Code != tt.code || r.Exit.Signal != tt.sig || r.Exit.ShellCode() != tt.shellCode {
				t.Fatalf("%q: exit %+v, want code %d signal %d", tt.cmd, r.Exit, tt.code, tt.sig)
			}
		})
	}
}

func TestShellStringAndArgv(t *testing.T) {
	r := sh(t, client.Spec{Shell: `echo "$((6*7))"`}, nil)
	if r.Stdout != "42\n" {
		t.Fatalf("shell string: %q", r.Stdout)
	}
	r = sh(t, client.Spec{Argv: []string{"echo", "a b", "$HOME"}}, nil)
	if r.Stdout != "a b $HOME\n" {
		t.Fatalf("argv is not shell-expanded: %q", r.Stdout)
	}
}

func TestStdoutStderrSeparate(t *testing.T) {
	r := sh(t, shell("for i in 1 2 3; do echo out$i; echo err$i >&2; done"), nil)
	if r.Stdout != "out1\nout2\nout3\n" || r.Stderr != "err1\nerr2\nerr3\n" {
		t.Fatalf("stdout %q stderr %q", r.Stdout, r.Stderr)
	}
}

func TestStdin(t *testing.T) {
	data := make([]byte, 3<<20)
	_, _ = rand.Read(data)
	sum := sha256.Sum256(data)
	r := sh(t, shell("sha256sum | cut -d' ' -f1"), bytes.NewReader(data))
	if strings.TrimSpace(r.Stdout) != hex.EncodeToString(sum[:]) {
		t.Fatalf("stdin arrived changed: guest sha256 %q", r.Stdout)
	}
	// Without stdin the task reads /dev/null and does not hang.
	r = sh(t, client.Spec{Argv: []string{"cat"}}, nil)
	if r.Exit.Code != 0 || r.Stdout != "" {
		t.Fatalf("cat without stdin: %+v %q", r.Exit, r.Stdout)
	}
}

func TestLargeOutputByteExact(t *testing.T) {
	const size = 100 << 20
	r := sh(t, shell("head -c 104857600 /dev/urandom > /tmp/big && sha256sum /tmp/big | cut -d' ' -f1"), nil)
	want := strings.TrimSpace(r.Stdout)
	if r.Exit.Code != 0 || len(want) != 64 {
		t.Fatalf("make the file: %+v %q %q", r.Exit, r.Stdout, r.Stderr)
	}
	h := sha256.New()
	n := &countWriter{w: h}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	began := time.Now()
	exit, err := shared.Agent().Exec(ctx, shell("cat /tmp/big; rm /tmp/big"), client.Stdio{Stdout: n})
	if err != nil || exit.Code != 0 {
		t.Fatalf("cat: %+v %v", exit, err)
	}
	if n.n != size || hex.EncodeToString(h.Sum(nil)) != want {
		t.Fatalf("got %d bytes with sha256 %x, want %d bytes with %s", n.n, h.Sum(nil), size, want)
	}
	t.Logf("100 MiB of stdout in %s (%.1f MiB/s)", time.Since(began).Round(time.Millisecond), 100/time.Since(began).Seconds())
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return c.w.Write(p) }

func TestWorkspaceFilesBothWays(t *testing.T) {
	in := make([]byte, 1<<20)
	_, _ = rand.Read(in)
	if err := os.WriteFile(filepath.Join(sharedWS, "in.bin"), in, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(in)
	r := sh(t, shell("sha256sum /workspace/in.bin | cut -d' ' -f1; head -c 1048576 /dev/urandom > /workspace/out.bin; sha256sum /workspace/out.bin | cut -d' ' -f1; pwd"), nil)
	lines := strings.Fields(r.Stdout)
	if len(lines) != 3 || lines[0] != hex.EncodeToString(sum[:]) {
		t.Fatalf("host→guest: %q (stderr %q)", r.Stdout, r.Stderr)
	}
	if lines[2] != "/workspace" {
		t.Fatalf("default cwd %q, want /workspace", lines[2])
	}
	out, err := os.ReadFile(filepath.Join(sharedWS, "out.bin"))
	if err != nil {
		t.Fatalf("guest→host: %v", err)
	}
	got := sha256.Sum256(out)
	if hex.EncodeToString(got[:]) != lines[1] {
		t.Fatalf("guest→host: file differs")
	}
	fi, _ := os.Stat(filepath.Join(sharedWS, "out.bin"))
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != vmharness.UserUID() {
		t.Fatalf("a file the task wrote belongs to uid %d on the host, want the folder owner %d", st.Uid, vmharness.UserUID())
	}
	// Nothing but the workspace is shared: the host's other folders are not there.
	r = sh(t, shell("ls /workspace"), nil)
	if !strings.Contains(r.Stdout, "in.bin\n") || !strings.Contains(r.Stdout, "out.bin\n") {
		t.Fatalf("workspace listing: %q", r.Stdout)
	}
	r = sh(t, shell("grep -c ' /workspace ' /proc/mounts; grep -cE ' (virtiofs|9p) ' /proc/mounts"), nil)
	if r.Stdout != "1\n1\n" {
		t.Fatalf("one shared mount expected: %q", r.Stdout)
	}
}

// TestWorkspaceEverydayWork: what a task does with a user's folder all day
// works through the share as it is served (as the folder's owner when the
// tests run as root): the host's files are there as the owner's and editable,
// scripts are written, made executable, run, renamed and removed, and what
// the guest leaves behind, even as root, belongs to the folder's owner.
func TestWorkspaceEverydayWork(t *testing.T) {
	dir := filepath.Join(sharedWS, "everyday")
	os.Mkdir(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("from the host\n"), 0o644)
	uid := vmharness.UserUID()
	if os.Getuid() == 0 {
		os.Chown(dir, int(uid), int(uid))
		os.Chown(filepath.Join(dir, "notes.txt"), int(uid), int(uid))
	}
	r := sh(t, shell(`cd /workspace/everyday && stat -c '%u %a' notes.txt && cat notes.txt && echo edited >> notes.txt &&
		printf '#!/bin/sh\necho ran\n' > job.sh && chmod +x job.sh && ./job.sh && mkdir -p bin/x && mv job.sh bin/x/run.sh &&
		bin/x/run.sh && echo gone > tmp.txt && rm tmp.txt && rmdir bin/x 2>/dev/null; ls -R`), nil)
	if want := fmt.Sprint(uid) + " 644\nfrom the host\nran\nran\n.:\nbin\nnotes.txt\n\n./bin:\nx\n\n./bin/x:\nrun.sh\n"; r.Stdout != want {
		t.Fatalf("everyday work in the workspace:\n%s\nwant stdout %q", r, want)
	}
	r = sh(t, client.Spec{Argv: []string{"sh", "-c", "echo by-root > /workspace/everyday/root.txt"}, Root: true}, nil)
	if r.Exit.Code != 0 {
		t.Fatalf("a --root task cannot write the workspace: %s", r)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "notes.txt")); string(b) != "from the host\nedited\n" {
		t.Errorf("the host sees notes.txt as %q", b)
	}
	for name, perm := range map[string]os.FileMode{"bin/x/run.sh": 0o755, "root.txt": 0o644, "bin": 0o755} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("the host does not see %s: %v", name, err)
			continue
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode().Perm() != perm || st.Uid != uid {
			t.Errorf("the host sees %s as %v owned by %d, want %v owned by the folder's owner %d", name, fi.Mode(), st.Uid, perm, uid)
		}
	}
}

func TestUnprivilegedByDefault(t *testing.T) {
	r := sh(t, shell("id -u; id -g; grep NoNewPrivs /proc/self/status | tr -d ' \t'"), nil)
	if want := fmt.Sprintf("%d\n%d\nNoNewPrivs:1\n", vmharness.UserUID(), vmharness.UserUID()); r.Stdout != want {
		t.Fatalf("default task identity: %q", r.Stdout)
	}
	r = sh(t, client.Spec{Argv: []string{"id", "-u"}, Root: true}, nil)
	if r.Stdout != "0\n" {
		t.Fatalf("--root task: %q", r.Stdout)
	}
	// The unprivileged user cannot become root or write system files.
	r = sh(t, shell("echo x > /etc/passwd"), nil)
	if r.Exit.Code == 0 {
		t.Fatalf("uid 1000 wrote /etc/passwd")
	}
}

func TestEnvAndCwd(t *testing.T) {
	r := sh(t, client.Spec{Argv: []string{"sh", "-c", "echo $GREETING; pwd; echo $HOME"}, Env: []string{"GREETING=hello there"}, Cwd: "/tmp"}, nil)
	if r.Stdout != "hello there\n/tmp\n/home/agent\n" {
		t.Fatalf("env/cwd: %q", r.Stdout)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := shared.Agent().Exec(ctx, client.Spec{Argv: []string{"true"}, Cwd: "/nonexistent"}, client.Stdio{})
	if !errors.Is(err, agentv1.ErrInvalidArgument) {
		t.Fatalf("bad cwd: %v", err)
	}
	_, err = shared.Agent().Exec(ctx, client.Spec{Argv: []string{"no-such-command"}}, client.Stdio{})
	if !errors.Is(err, agentv1.ErrNotFound) {
		t.Fatalf("missing command: %v", err)
	}
}

// TestKillProcessTree cancels a task whose tree includes a daemonised
// grandchild and checks the whole tree is gone.
func TestKillProcessTree(t *testing.T) {
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := shared.Agent().Exec(ctx, shell("sleep 1001 & setsid sh -c 'sleep 1002' & echo ready; wait"), client.Stdio{Stdout: pw})
		pw.Close()
		done <- err
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("task did not start: %q %v", line, err)
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatalf("cancelled exec returned no error")
	}
	go io.Copy(io.Discard, pr)
	waitGone(t, "sleep 100[12]")

	// An explicit signal reaches the whole group and ends the task with it.
	sig := make(chan int, 1)
	sig <- 15
	ctx2, cancel2 := context.WithTimeout(context.Background(), time.Minute)
	defer cancel2()
	exit, err := shared.Agent().Exec(ctx2, shell("sleep 1003 & sleep 1004; echo survived"), client.Stdio{Signal: sig})
	if err != nil || exit.Signal != 15 {
		t.Fatalf("signalled task: %+v %v", exit, err)
	}
	waitGone(t, "sleep 100[34]")
}

// waitGone waits until no guest process matches pattern (bounded).
func waitGone(t *testing.T, pattern string) {
	t.Helper()
	for i := 0; ; i++ {
		r := sh(t, client.Spec{Argv: []string{"sh", "-c", "ps -o args | grep -v grep | grep -c '" + pattern + "' || true"}, Root: true}, nil)
		if strings.TrimSpace(r.Stdout) == "0" {
			return
		}
		if i == 50 {
			t.Fatalf("processes matching %q survived their task", pattern)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestDeadline(t *testing.T) {
	r := sh(t, client.Spec{Argv: []string{"sh", "-c", "sleep 1005 & sleep 1006"}, Timeout: 2 * time.Second}, nil)
	if !r.Exit.TimedOut {
		t.Fatalf("task past its deadline: %+v", r.Exit)
	}
	waitGone(t, "sleep 100[56]")
}

func TestTTY(t *testing.T) {
	r := sh(t, client.Spec{Argv: []string{"sh", "-c", "tty; stty size; echo err >&2"}, TTY: true, Rows: 40, Cols: 100}, nil)
	if !strings.Contains(r.Stdout, "/dev/pts/") || !strings.Contains(r.Stdout, "40 100") || !strings.Contains(r.Stdout, "err") {
		t.Fatalf("tty task output %q", r.Stdout)
	}
	resize := make(chan client.Size, 1)
	resize <- client.Size{Rows: 50, Cols: 132}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out bytes.Buffer
	_, err := shared.Agent().Exec(ctx, client.Spec{Argv: []string{"sh", "-c", "sleep 1; stty size"}, TTY: true, Rows: 24, Cols: 80},
		client.Stdio{Stdout: &out, Resize: resize})
	if err != nil || !strings.Contains(out.String(), "50 132") {
		t.Fatalf("resize: %q %v", out.String(), err)
	}
}

func TestGuestInfo(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	info, err := shared.Agent().Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(info.Kernel, "6.") || info.MemoryTotalBytes == 0 || info.UptimeMs <= 0 || info.WorkspaceFs == "" {
		t.Fatalf("info: %+v", info)
	}
	t.Logf("guest: %+v", info)
	// No network interface but loopback.
	r := sh(t, shell("ls /sys/class/net"), nil)
	if strings.TrimSpace(r.Stdout) != "lo" {
		t.Fatalf("guest network interfaces: %q", r.Stdout)
	}
}

// TestKernelLockedDown: the guest kernel enforces the lockdown=confidentiality
// that guest/api.KernelArgs puts on every command line, whichever kernel
// the image has, so guest root (a task may be root) cannot read the
// kernel's memory. The kernel says so once at boot; the source-built
// kernel, without the lockdown LSM, called the word unknown instead.
func TestKernelLockedDown(t *testing.T) {
	r := sh(t, client.Spec{Argv: []string{"dmesg"}, Root: true}, nil)
	log := r.Stdout
	if len(log) > 4000 {
		log = "..." + log[len(log)-4000:]
	}
	if !strings.Contains(r.Stdout, "Kernel is locked down from command line") {
		t.Fatalf("the guest kernel does not say it is locked down (stderr %q); its log:\n%s", r.Stderr, log)
	}
	if strings.Contains(r.Stdout, "Unknown kernel command line parameters") && strings.Contains(r.Stdout, "lockdown=") {
		t.Fatalf("the guest kernel does not know lockdown=; its log:\n%s", log)
	}
}

// TestGuestClock: the guest's clock keeps the host's pace, and an amd64
// guest under TCG on a host whose TSC is its clock is told the rate the
// backend measured (vm/qemu/tsc.go) and uses the TSC rather than the
// emulated HPET.
// TestIdleTick: an idle guest CPU stops its timer tick. Without a timer
// that runs through idle (ARAT, which QEMU's default TCG CPU lacks) and no
// broadcast timer to stand in (microvm has none), the kernel never leaves
// its periodic tick: every VM, idle or not, then took 1000 emulated timer
// interrupts a second per CPU (13-17 % of a host core at rest).
func TestIdleTick(t *testing.T) {
	r := sh(t, client.Spec{Root: true, Argv: []string{"sh", "-c",
		"grep -c '^cpu: ' /proc/timer_list; grep -c 'hres_active *: 1' /proc/timer_list; grep -c 'nohz_mode *: [12]' /proc/timer_list"}}, nil)
	f := strings.Fields(r.Stdout)
	if len(f) != 3 {
		t.Fatalf("timer_list: %q %q", r.Stdout, r.Stderr)
	}
	t.Logf("guest CPUs %s, with high-resolution timers %s, with the tick stopping when idle %s", f[0], f[1], f[2])
	if f[1] != f[0] || f[2] != f[0] {
		t.Errorf("of %s guest CPUs, %s have high-resolution timers and %s stop their tick when idle; want all", f[0], f[1], f[2])
	}
}

func TestGuestClock(t *testing.T) {
	// The kernel starts on "tsc-early" and moves to "tsc" once it has
	// refined the rate, about a second after boot: a test run first after
	// a quick boot can be there before it (wait up to 5 s).
	r := sh(t, shell(`cs=/sys/devices/system/clocksource/clocksource0/current_clocksource
i=0; while [ "$(cat $cs)" = tsc-early ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done
cat /proc/cmdline $cs`), nil)
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	if len(lines) != 2 {
		t.Fatalf("cmdline and clocksource: %q %q", r.Stdout, r.Stderr)
	}
	cmdline, source := lines[0], lines[1]
	t.Logf("guest clocksource %s; cmdline %s", source, cmdline)
	var told int
	for _, w := range strings.Fields(cmdline) {
		if v, ok := strings.CutPrefix(w, "tsc_early_khz="); ok {
			told, _ = strconv.Atoi(v)
		}
	}
	if told > 0 && source != "tsc" {
		t.Errorf("the guest was told its TSC rate but uses %s", source)
	}
	if khz := qemu.HostTSCkHz(); runtime.GOARCH == "amd64" && shared.Machine().Info().Accelerator == "tcg" && khz > 0 {
		// The shared VM's rate was measured by this process too (once):
		// the two must be the same number.
		if told != khz {
			t.Errorf("amd64 guest under TCG on a host whose TSC is its clock (%d kHz) was told %d kHz: %s", khz, told, cmdline)
		}
	}

	// Three seconds of the guest's clock against the host's: a rate off by
	// a third either way fails (a wrongly calibrated TSC is off by far
	// more; the kernel refines a rate it was told to within 1%).
	start := time.Now()
	r = sh(t, shell("cat /proc/uptime; sleep 3; cat /proc/uptime"), nil)
	host := time.Since(start).Seconds()
	var a, b, idle float64
	if _, err := fmt.Sscanf(r.Stdout, "%f %f\n%f", &a, &idle, &b); err != nil {
		t.Fatalf("uptime: %q: %v", r.Stdout, err)
	}
	guest := b - a
	t.Logf("guest clock %.3f s across host %.3f s", guest, host)
	if guest < 2.99 || guest > host+0.05 || host-guest > 1.5 {
		t.Errorf("the guest's clock measured %.3f s while the host's measured %.3f s for its 3 s sleep", guest, host)
	}
}
