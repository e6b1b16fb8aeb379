//go:build e2e

package vz

// Tests against the real framework, on a Mac only:
//
//	make image-all   # on Linux, or copy images/out/arm64 over
//	go test -tags e2e -exec build/darwin/codesign-exec -v ./vm/vz
//
// The test binary must carry the virtualization entitlement, which
// build/darwin/codesign-exec adds before running it. AIRLOCK_IMAGE_DIR
// overrides images/out.

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/guest/api"
	"github.com/airlock-sandbox/airlock/guest/client"
	"github.com/airlock-sandbox/airlock/guest/console"
	"github.com/airlock-sandbox/airlock/vm"
)

func e2eImage(t *testing.T) (kernel, initrd string) {
	t.Helper()
	root := os.Getenv("AIRLOCK_IMAGE_DIR")
	if root == "" {
		_, file, _, _ := runtime.Caller(0)
		root = filepath.Join(filepath.Dir(file), "..", "..", "images", "out")
	}
	if runtime.GOARCH != "arm64" {
		t.Skip("Intel Macs are refused before boot (checkHost)")
	}
	dir := filepath.Join(root, runtime.GOARCH)
	kernel, initrd = filepath.Join(dir, "Image"), filepath.Join(dir, "initramfs.cpio")
	if _, err := os.Stat(kernel); err != nil {
		t.Skipf("no guest image in %s (make image-all, or set AIRLOCK_IMAGE_DIR)", dir)
	}
	return kernel, initrd
}

func e2eConfig(t *testing.T, share *vm.Share) vm.Config {
	kernel, initrd := e2eImage(t)
	dir := t.TempDir()
	return vm.Config{
		Kernel: kernel, Initrd: initrd, CPUs: 2, MemoryMiB: 512, Dir: dir, Share: share,
		// virtio-fs on macOS shows the host user's files as theirs: the
		// task user must be that user to write.
		Cmdline: api.BootConfig{UID: uint32(os.Getuid()), GID: uint32(os.Getgid())}.Args(),
	}
}

// awaitReady accepts the guest's readiness message.
func awaitReady(t *testing.T, m *Machine, l net.Listener) {
	t.Helper()
	got := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			got <- err
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		r, err := api.ReadReady(c)
		t.Logf("ready: %+v", r)
		got <- err
	}()
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		con, _ := os.ReadFile(m.Info().ConsoleLog)
		t.Fatalf("no readiness message in 60s; console:\n%s", con)
	case <-m.exited:
		con, _ := os.ReadFile(m.Info().ConsoleLog)
		t.Fatalf("machine ended during boot: %v; console:\n%s", m.Wait(context.Background()), con)
	}
}

func TestE2EBoot(t *testing.T) {
	for _, readOnly := range []bool{false, true} {
		t.Run(fmt.Sprintf("read-only=%t", readOnly), func(t *testing.T) {
			ws := t.TempDir()
			os.WriteFile(filepath.Join(ws, "hello.txt"), []byte("from the host\n"), 0o644)
			m, err := New(e2eConfig(t, &vm.Share{HostPath: ws, ReadOnly: readOnly}), Options{})
			if err != nil {
				t.Fatal(err)
			}
			ready, err := m.Listen(api.PortReady) // before Start: the contract
			if err != nil {
				t.Fatal(err)
			}
			if _, err := m.Listen(api.PortReady); !errors.Is(err, vm.ErrPortInUse) {
				t.Errorf("second Listen on a port: %v", err)
			}
			began := time.Now()
			if err := m.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			defer m.Stop(context.Background())
			awaitReady(t, m, ready)
			t.Logf("ready after %v; info %+v", time.Since(began).Round(time.Millisecond), m.Info())
			ready.Close()

			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if _, err := m.Dial(ctx, 4000); !errors.Is(err, vm.ErrConnRefused) {
				t.Errorf("dial a port nobody listens on: %v, want vm.ErrConnRefused", err)
			}
			cl, err := client.New(m.Dial)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			var out, errb bytes.Buffer
			exit, err := cl.Exec(ctx, client.Spec{Shell: "id; cat /workspace/hello.txt; echo made > /workspace/made.txt; ls /sys/class/net"}, client.Stdio{Stdout: &out, Stderr: &errb})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("exit %+v\nstdout:\n%s\nstderr:\n%s", exit, out.String(), errb.String())
			if !strings.Contains(out.String(), "from the host") {
				t.Error("the guest did not see the shared file")
			}
			_, err = os.Stat(filepath.Join(ws, "made.txt"))
			if readOnly && err == nil {
				t.Error("the guest wrote into a read-only share")
			} else if !readOnly && err != nil {
				t.Errorf("the guest's write did not reach the host: %v", err)
			}
			for _, nic := range []string{"eth", "enp", "en0"} {
				if strings.Contains(out.String(), nic) {
					t.Errorf("the guest has a network interface: %s", out.String())
				}
			}

			if !readOnly {
				// Stop with the guest running: RequestStop, then Stop.
				began := time.Now()
				if err := m.Stop(ctx); err != nil {
					t.Fatal(err)
				}
				t.Logf("Stop took %v", time.Since(began).Round(time.Millisecond))
			} else {
				// A guest power-off is seen by the state reader.
				if err := cl.Shutdown(ctx, false); err != nil {
					t.Logf("shutdown: %v", err)
				}
			}
			if err := m.Wait(ctx); err != nil {
				t.Errorf("Wait: %v", err)
			}
			if s := m.State(); s != vm.StateStopped {
				t.Errorf("state %s, want stopped", s)
			}
			con, _ := os.ReadFile(m.Info().ConsoleLog)
			if !bytes.Contains(con, []byte(console.Prefix)) {
				// See README.md: hvc0 exists only once init loads
				// virtio_console, after it opened /dev/console.
				t.Logf("console log (%d bytes) has no airlock-guest lines:\n%s", len(con), con)
			}
		})
	}
}

func TestE2ECompressedKernel(t *testing.T) {
	cfg := e2eConfig(t, nil)
	raw, err := os.ReadFile(cfg.Kernel)
	if err != nil {
		t.Fatal(err)
	}
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	w.Write(raw)
	w.Close()
	cfg.Kernel = filepath.Join(cfg.Dir, "Image.gz")
	os.WriteFile(cfg.Kernel, gz.Bytes(), 0o644)
	_, err = New(cfg, Options{})
	if !errors.Is(err, vm.ErrInvalidConfig) || !strings.Contains(err.Error(), "gzip") {
		t.Fatalf("compressed kernel: %v", err)
	}
	t.Log(err)
}

func TestE2ELimits(t *testing.T) {
	lim := hostLimits()
	t.Logf("this Mac: %+v", lim)
	cfg := e2eConfig(t, nil)
	cfg.CPUs = int(lim.MaxCPUs) + 1
	if _, err := New(cfg, Options{}); !errors.Is(err, vm.ErrInvalidConfig) {
		t.Fatalf("too many CPUs: %v", err)
	} else {
		t.Log(err)
	}
}

func TestE2EListenerClose(t *testing.T) {
	m, err := New(e2eConfig(t, nil), Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := m.Listen(5000)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := l.Accept(); done <- err }()
	l.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("Accept after Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Accept still blocked after Close")
	}
	if _, err := m.Listen(5000); err != nil {
		t.Errorf("listen again after Close: %v", err)
	}
	m.Stop(context.Background()) // never started: ends at once
	if s := m.State(); s != vm.StateStopped {
		t.Errorf("state %s", s)
	}
}
