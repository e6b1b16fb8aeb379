package qemu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/vm"
)

// Accelerator choices in Options.Accel and AIRLOCK_ACCEL.
const (
	AccelAuto = "auto"
	AccelKVM  = "kvm"
	AccelTCG  = "tcg"
)

// EnvAccel overrides the accelerator when Options.Accel is empty.
const EnvAccel = "AIRLOCK_ACCEL"

// accelMode is the requested accelerator: Options.Accel, else $AIRLOCK_ACCEL,
// else auto.
func accelMode(opt string, getenv func(string) string) (string, error) {
	mode := optOrEnv(opt, EnvAccel, getenv)
	switch mode {
	case "":
		return AccelAuto, nil
	case AccelAuto, AccelKVM, AccelTCG:
		return mode, nil
	}
	return "", fmt.Errorf("%w: accelerator %q: want auto, kvm or tcg", vm.ErrInvalidConfig, mode)
}

// optOrEnv is an option's value, else the environment variable key's
// (trimmed, lower case).
func optOrEnv(opt, key string, getenv func(string) string) string {
	if opt != "" {
		return opt
	}
	return strings.ToLower(strings.TrimSpace(getenv(key)))
}

// kvmHost says what the host offers for KVM; the machine's tests replace it.
type kvmHost interface {
	// open checks /dev/kvm opens read-write.
	open() error
	// key identifies what the probe verdict depends on: the host kernel and
	// the QEMU binary.
	key(qemu string) (string, error)
	// probe runs the probe VM; nil means KVM ran it in time.
	probe(ctx context.Context, qemu string) error
}

// verdict is one cached probe result.
type verdict struct {
	OK     bool      `json:"ok"`
	Detail string    `json:"detail,omitempty"`
	Millis int64     `json:"ms"`
	When   time.Time `json:"when"`
}

// accelCache persists verdicts in one JSON file, keyed by kvmHost.key.
type accelCache struct{ path string }

func (c accelCache) load() map[string]verdict {
	m := map[string]verdict{}
	if c.path == "" {
		return m
	}
	b, err := os.ReadFile(c.path)
	if err != nil || len(b) > 1<<20 {
		return m
	}
	if json.Unmarshal(b, &m) != nil {
		return map[string]verdict{}
	}
	return m
}

func (c accelCache) get(key string) (verdict, bool) {
	v, ok := c.load()[key]
	return v, ok
}

// put stores v; a cache that cannot be written only costs a probe later.
func (c accelCache) put(key string, v verdict) error {
	if c.path == "" {
		return nil
	}
	m := c.load()
	m[key] = v
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return replaceFile(c.path, b)
}

// replaceFile writes a cache file whole (a temporary file renamed over
// it), in a private folder it makes when missing.
func replaceFile(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// chooseAccel resolves mode to "kvm" or "tcg" for a guest of arch on a host
// of hostArch. Forcing kvm fails clearly when KVM cannot run the guest.
func chooseAccel(ctx context.Context, mode, arch, hostArch, qemu string, h kvmHost, cache accelCache) (string, error) {
	if mode == AccelTCG {
		return AccelTCG, nil
	}
	unusable := func(why error) (string, error) {
		if mode == AccelKVM {
			return "", fmt.Errorf("%w: KVM was asked for (%s=kvm or Options.Accel) but %w; use %s=tcg to run without it",
				vm.ErrNoHypervisor, EnvAccel, why, EnvAccel)
		}
		return AccelTCG, nil
	}
	if arch != hostArch {
		return unusable(fmt.Errorf("an %s guest cannot use KVM on an %s host", arch, hostArch))
	}
	if err := h.open(); err != nil {
		return unusable(fmt.Errorf("/dev/kvm is not usable (%w); add your user to the kvm group", err))
	}
	key, err := h.key(qemu)
	if err == nil {
		if v, ok := cache.get(key); ok {
			if v.OK {
				return AccelKVM, nil
			}
			return unusable(fmt.Errorf("KVM failed its probe (cached in %s: %s); delete that file to probe again", cache.path, v.Detail))
		}
	}
	start := time.Now()
	perr := h.probe(ctx, qemu)
	if ctx.Err() != nil {
		return "", fmt.Errorf("qemu: probing KVM: %w", ctx.Err())
	}
	v := verdict{OK: perr == nil, Millis: time.Since(start).Milliseconds(), When: time.Now().UTC()}
	if perr != nil {
		v.Detail = perr.Error()
	}
	if key != "" {
		cache.put(key, v)
	}
	if perr != nil {
		return unusable(fmt.Errorf("KVM failed its probe: %w", perr))
	}
	return AccelKVM, nil
}

// realKVM is the host's KVM.
type realKVM struct {
	timeout time.Duration
	dir     string // where the probe firmware is written
}

func (realKVM) open() error {
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return err
	}
	return f.Close()
}

func (realKVM) key(qemu string) (string, error) {
	release, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(qemu)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s|%s|%d", strings.TrimSpace(string(release)), qemu, fi.ModTime().UnixNano()), nil
}

// probe runs the firmware under KVM. The firmware only exists for x86; on
// other hosts opening /dev/kvm has to do.
func (k realKVM) probe(ctx context.Context, qemu string) error {
	if hostArch() != "amd64" {
		return nil
	}
	fw := filepath.Join(k.dir, "kvm-probe.bin")
	if err := os.WriteFile(fw, probeFirmware(), 0o600); err != nil {
		return err
	}
	defer os.Remove(fw)
	ctx, cancel := context.WithTimeout(ctx, k.timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, qemu, probeArgs(fw)...)
	stderr := newTail(2048)
	cmd.Stderr = stderr
	setProcAttr(cmd)
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case ctx.Err() == context.DeadlineExceeded:
		return fmt.Errorf("the probe VM did not finish within %v (KVM runs, but far too slowly: nested virtualization?)", k.timeout)
	case errors.As(err, &exit) && exit.ExitCode() == probeExitStatus:
		return nil
	case err == nil:
		return errors.New("the probe VM exited without running the probe")
	}
	return fmt.Errorf("the probe VM failed: %w: %s", err, stderr.String())
}

// runQuiet runs QEMU with args and discards its output.
func runQuiet(ctx context.Context, qemu string, args []string) error {
	cmd := exec.CommandContext(ctx, qemu, args...)
	setProcAttr(cmd)
	return cmd.Run()
}
