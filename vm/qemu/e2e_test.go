//go:build e2e

package qemu

// Tests against a real QEMU: go test -tags e2e ./vm/qemu. The boot tests
// need images/out/<arch>/{vmlinux,initramfs.cpio} (see images/).

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/guest/api"
	"github.com/airlock-sandbox/airlock/guest/client"
	"github.com/airlock-sandbox/airlock/images/manifest"
	"github.com/airlock-sandbox/airlock/vm"
)

func e2eConfig(t *testing.T) vm.Config {
	t.Helper()
	dir := t.TempDir()
	return vm.Config{Kernel: filepath.Join(dir, "vmlinux"), Initrd: filepath.Join(dir, "initrd"), CPUs: 1, MemoryMiB: 256, Dir: dir}
}

func TestE2EBadKernel(t *testing.T) {
	cfg := e2eConfig(t)
	m, err := New(cfg, Options{Accel: AccelTCG})
	if err != nil {
		t.Fatal(err)
	}
	err = m.Start(context.Background())
	if !errors.Is(err, vm.ErrInvalidConfig) || !strings.Contains(err.Error(), "vmlinux") {
		t.Fatalf("missing kernel: %v", err)
	}
	t.Logf("missing kernel: %v", err)

	// A kernel file QEMU cannot load: the error carries QEMU's words.
	cfg = e2eConfig(t)
	os.WriteFile(cfg.Kernel, []byte("not a kernel"), 0o644)
	os.WriteFile(cfg.Initrd, nil, 0o644)
	m, err = New(cfg, Options{Accel: AccelTCG})
	if err != nil {
		t.Fatal(err)
	}
	err = m.Start(context.Background())
	if err == nil {
		err = m.Wait(context.Background())
	}
	if err == nil || !strings.Contains(err.Error(), "kernel") {
		t.Fatalf("bad kernel: %v", err)
	}
	if s := m.State(); s != vm.StateFailed {
		t.Errorf("state %s", s)
	}
	t.Logf("bad kernel: %v", err)
}

func TestE2EMissingQEMU(t *testing.T) {
	_, err := New(e2eConfig(t), Options{QEMU: "/nonexistent/qemu-system-x86_64"})
	if !errors.Is(err, vm.ErrNoHypervisor) || !strings.Contains(err.Error(), "apt install qemu-system-x86") {
		t.Fatalf("err = %v", err)
	}
	t.Log(err)
}

func TestE2EKVMProbe(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the probe firmware is x86")
	}
	qemu, err := resolveOptions(Options{}, os.Getenv, lookPath)
	if err != nil {
		t.Skip(err)
	}
	// TCG must always run the probe: this checks the firmware itself.
	fw := filepath.Join(t.TempDir(), "probe.bin")
	os.WriteFile(fw, probeFirmware(), 0o600)
	args := probeArgs(fw)
	args[1], args[3] = "q35,accel=tcg", "max"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = runQuiet(ctx, qemu.QEMU, args)
	var ee interface{ ExitCode() int }
	if !errors.As(err, &ee) || ee.ExitCode() != probeExitStatus {
		t.Fatalf("probe under TCG: %v", err)
	}
	k := realKVM{timeout: 2 * time.Second, dir: t.TempDir()}
	if err := k.open(); err != nil {
		t.Skipf("no /dev/kvm: %v", err)
	}
	start := time.Now()
	err = k.probe(context.Background(), qemu.QEMU)
	t.Logf("KVM probe: %v after %v", err, time.Since(start).Round(time.Millisecond))
}

// imagesDir is the minimal image the product boots here
// (manifest.DirUnder): on a Linux amd64 host the one with the kernel built
// from linux-source when it was built; with debian set the one with
// Debian's kernel and modules.
func imagesDir(t *testing.T, debian bool) string {
	_, file, _, _ := runtime.Caller(0)
	out := filepath.Join(filepath.Dir(file), "..", "..", "images", "out")
	dir := manifest.DirUnder(out, manifest.ImageMinimal, runtime.GOOS, runtime.GOARCH)
	if debian {
		dir = filepath.Join(out, runtime.GOARCH)
	}
	if _, err := os.Stat(filepath.Join(dir, "vmlinux")); err != nil {
		t.Skipf("no guest image in %s: build it with images/", dir)
	}
	return dir
}

func TestE2EBoot(t *testing.T) {
	// owner is who the folder belongs to when the test runs as root: a
	// user's folder is served by QEMU running as that user, root's with
	// the guest's metadata in xattrs (see chooseShare).
	tests := []struct {
		name     string
		readOnly bool
		share    string
		want     string
		owner    uint32
		machine  string // Options.Machine
		// debian boots the image with Debian's kernel, which loads the
		// virtio and 9p drivers as modules, instead of the product's
		// (on amd64 the kernel built from linux-source, drivers built in).
		debian bool
	}{
		{"rw-auto", false, ShareAuto, Share9P, 1000, "", false},
		// q35 asked for: the machine of KVM hosts and of hosts whose TSC
		// rate is not measured, which CI's default (microvm here) skips.
		{"rw-9p-root-folder-q35", false, Share9P, Share9P, 0, MachineQ35, false},
		{"ro-9p-debian-kernel", true, ShareAuto, Share9P, 1000, "", true},
		{"ro-9p-root-folder", true, ShareAuto, Share9P, 0, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := e2eConfig(t)
			img := imagesDir(t, tt.debian)
			cfg.Kernel, cfg.Initrd = filepath.Join(img, "vmlinux"), filepath.Join(img, "initramfs.cpio")
			cfg.MemoryMiB = 512
			ws := t.TempDir()
			os.Chmod(ws, 0o777)
			os.WriteFile(filepath.Join(ws, "hello.txt"), []byte("from the host\n"), 0o644)
			if isRoot() {
				os.Chown(ws, int(tt.owner), int(tt.owner))
				os.Chown(filepath.Join(ws, "hello.txt"), int(tt.owner), int(tt.owner))
			}
			cfg.Share = &vm.Share{HostPath: ws, ReadOnly: tt.readOnly}
			m, err := New(cfg, Options{Share: tt.share, Machine: tt.machine})
			if err != nil {
				t.Fatal(err)
			}
			ready, err := m.Listen(api.PortReady)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if err := m.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			defer m.Stop(context.Background())
			info := m.Info()
			t.Logf("info %+v", info)
			if tt.want != "" && info.Share != tt.want {
				t.Errorf("share %s, want %s", info.Share, tt.want)
			}
			if tt.machine != "" && runtime.GOARCH == "amd64" && info.Machine != tt.machine {
				t.Errorf("machine %s, want %s", info.Machine, tt.machine)
			}
			if uid := processUID(t, info.PID); isRoot() && uid != tt.owner {
				t.Errorf("QEMU runs as uid %d, want the folder owner's %d", uid, tt.owner)
			}
			type res struct {
				r   api.Ready
				err error
			}
			rc := make(chan res, 1)
			go func() {
				c, err := ready.Accept()
				if err != nil {
					rc <- res{err: err}
					return
				}
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				r, err := api.ReadReady(c)
				rc <- res{r, err}
			}()
			select {
			case r := <-rc:
				if r.err != nil {
					t.Fatal(r.err)
				}
				t.Logf("ready after %v (guest %d ms): %+v", time.Since(start).Round(time.Millisecond), r.r.BootMillis, r.r)
			case <-time.After(180 * time.Second):
				con, _ := os.ReadFile(m.Info().ConsoleLog)
				t.Fatalf("no ready message; console:\n%s", tail3k(con))
			case <-waitCh(m):
				con, _ := os.ReadFile(m.Info().ConsoleLog)
				t.Fatalf("machine ended: %v; console:\n%s", m.Wait(context.Background()), tail3k(con))
			}

			cl, err := client.New(m.Dial)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			var out, errb bytes.Buffer
			exit, err := cl.Exec(ctx, client.Spec{Shell: "id; cat /workspace/hello.txt; echo made > /workspace/made.txt; ls -ln /workspace; ip -o link 2>/dev/null || ls /sys/class/net; echo pci=$(ls /sys/bus/pci/devices | wc -l)"}, client.Stdio{Stdout: &out, Stderr: &errb})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("exit %+v\nstdout:\n%s\nstderr:\n%s", exit, out.String(), errb.String())
			if !strings.Contains(out.String(), "from the host") {
				t.Error("guest did not see the shared file")
			}
			fi, err := os.Stat(filepath.Join(ws, "made.txt"))
			switch {
			case tt.readOnly && err == nil:
				t.Error("guest wrote into a read-only share")
			case !tt.readOnly && err != nil:
				t.Errorf("guest write did not reach the host: %v", err)
			case !tt.readOnly:
				st := fi.Sys().(*syscall.Stat_t)
				t.Logf("host sees made.txt owned by %d:%d mode %v", st.Uid, st.Gid, fi.Mode())
				if isRoot() && tt.owner != 0 && st.Uid != tt.owner {
					t.Errorf("made.txt belongs to uid %d on the host, want the folder owner %d", st.Uid, tt.owner)
				}
				if isRoot() && tt.owner == 0 {
					// mapped-xattr: a plain file of QEMU's user, the guest's view in xattrs.
					var buf [64]byte
					if n, err := syscall.Getxattr(filepath.Join(ws, "made.txt"), "user.virtfs.uid", buf[:]); err != nil || n == 0 {
						t.Errorf("made.txt has no user.virtfs.uid xattr: %v", err)
					}
					if fi.Mode().Perm() != 0o600 || st.Uid != 0 {
						t.Errorf("made.txt on the host is %v owned by %d, want a plain 0600 file of root", fi.Mode(), st.Uid)
					}
				}
			}
			if tt.machine == MachineQ35 && strings.Contains(out.String(), "pci=0") {
				t.Error("the guest asked for q35 has no PCI devices")
			}
			if strings.Contains(out.String(), "eth") || strings.Contains(out.String(), "enp") {
				t.Error("the guest has a network interface")
			}
			if tt.name == "rw-auto" {
				// Stop with the guest running: QEMU and virtiofsd both go.
				m.mu.Lock()
				d := m.virtiofsd
				m.mu.Unlock()
				if err := m.Stop(ctx); err != nil {
					t.Fatal(err)
				}
				if err := processGone(info.PID); err != nil {
					t.Error(err)
				}
				if d != nil {
					if err := processGone(d.cmd.Process.Pid); err != nil {
						t.Errorf("virtiofsd: %v", err)
					}
				}
				if s := m.State(); s != vm.StateStopped {
					t.Errorf("state %s", s)
				}
				return
			}
			// A guest power-off ends QEMU with status 0, and Wait says nil.
			if err := cl.Shutdown(ctx, false); err != nil {
				t.Logf("shutdown: %v", err)
			}
			wctx, wcancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer wcancel()
			if err := m.Wait(wctx); err != nil {
				t.Errorf("Wait after power-off: %v", err)
			}
			if s := m.State(); s != vm.StateStopped {
				t.Errorf("state %s", s)
			}
		})
	}
}

// processUID is the real uid pid runs as.
func processUID(t *testing.T, pid int) uint32 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", itoa(pid), "status"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" {
			n, _ := strconv.Atoi(f[1])
			return uint32(n)
		}
	}
	t.Fatalf("no Uid in /proc/%d/status", pid)
	return 0
}

func waitCh(m *Machine) <-chan struct{} { return m.exited }

func tail3k(b []byte) []byte {
	if len(b) > 3000 {
		return b[len(b)-3000:]
	}
	return b
}
