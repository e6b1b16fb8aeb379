//go:build e2e

package desktop

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/app/api"
	"github.com/airlock-sandbox/airlock/app/session"
)

// TestE2EHelper runs the real airlock command as the app's helper, as the
// macOS app does (here with QEMU): the supervisor starts `airlock serve`,
// which boots its VM; Close stops it in order (SIGTERM: the VM shut down,
// not killed) and no process of it is left.
//
//	AIRLOCK_E2E_BIN=$PWD/bin/airlock AIRLOCK_IMAGE_DIR=$PWD/images/out go test -tags e2e -run TestE2EHelper ./app/desktop
func TestE2EHelper(t *testing.T) {
	bin, images := os.Getenv("AIRLOCK_E2E_BIN"), os.Getenv("AIRLOCK_IMAGE_DIR")
	if bin == "" || images == "" {
		t.Skip("set AIRLOCK_E2E_BIN and AIRLOCK_IMAGE_DIR")
	}
	root := t.TempDir()
	sock := filepath.Join(root, "run", "airlock", "airlock.sock")
	client := api.NewClient(sock)
	sup := newSupervisor(bin, helperArgs(sock, os.Getpid(), false, true), client.Ping, nil)
	sup.env = append(os.Environ(), "AIRLOCK_IMAGE_DIR="+images, "HOME="+root,
		"XDG_RUNTIME_DIR="+filepath.Join(root, "run"), "XDG_CONFIG_HOME="+filepath.Join(root, "config"),
		"XDG_STATE_HOME="+filepath.Join(root, "state"), "XDG_CACHE_HOME="+filepath.Join(root, "cache"))
	sup.Start()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		st, err := client.Status(context.Background())
		if err == nil && st.Session.State == session.StateRunning {
			break
		}
		if hs := sup.Status(); hs.State == HelperFailed || time.Now().After(deadline) {
			t.Fatalf("the helper's VM did not come up: helper %+v, status %+v, %v", hs, st.Session, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if hs := sup.Status(); hs.State != HelperRunning || !hs.Owned {
		t.Fatalf("helper %+v", hs)
	}
	// The helper and its QEMU, whose command lines name files under root.
	if got := under(root); len(got) < 2 {
		t.Fatalf("processes of this test: %q; want the helper and its QEMU", got)
	}
	start := time.Now()
	if err := sup.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Logf("the helper and its VM stopped in %s", time.Since(start).Round(time.Millisecond))
	if _, err := client.Status(context.Background()); err == nil {
		t.Error("the helper still answers after Close")
	}
	// Nothing started for this test lives on (QEMU's command line names
	// files under root).
	time.Sleep(500 * time.Millisecond)
	for _, p := range under(root) {
		t.Errorf("left behind: %s", p)
	}
}

// TestE2EHelperEndsWithTheApp: an app that dies without a Quit (killed,
// or crashed) leaves no helper and no VM: the helper, started with the
// app's pid as --parent-pid, sees its parent end, stops its VM and exits.
// Here sh stands in for the app and is killed with SIGKILL once the
// helper's VM runs.
//
//	AIRLOCK_E2E_BIN=$PWD/bin/airlock AIRLOCK_IMAGE_DIR=$PWD/images/out go test -tags e2e -run TestE2EHelperEndsWithTheApp ./app/desktop
func TestE2EHelperEndsWithTheApp(t *testing.T) {
	bin, images := os.Getenv("AIRLOCK_E2E_BIN"), os.Getenv("AIRLOCK_IMAGE_DIR")
	if bin == "" || images == "" {
		t.Skip("set AIRLOCK_E2E_BIN and AIRLOCK_IMAGE_DIR")
	}
	root := t.TempDir()
	sock := filepath.Join(root, "run", "airlock", "airlock.sock")
	client := api.NewClient(sock)
	// The helper's arguments as the app passes them, with sh's own pid.
	args := strings.Join(helperArgs(sock, 0, false, true), " ")
	args = strings.Replace(args, "--parent-pid 0", "--parent-pid $$", 1)
	app := exec.Command("sh", "-c", `"$0" `+args+` 2>"$1" & wait`, bin, filepath.Join(root, "helper.log"))
	app.Env = append(os.Environ(), "AIRLOCK_IMAGE_DIR="+images, "HOME="+root,
		"XDG_RUNTIME_DIR="+filepath.Join(root, "run"), "XDG_CONFIG_HOME="+filepath.Join(root, "config"),
		"XDG_STATE_HOME="+filepath.Join(root, "state"), "XDG_CACHE_HOME="+filepath.Join(root, "cache"))
	if err := app.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		app.Process.Kill()
		app.Wait()
		killUnder(root) // a helper that outlived its app, when this fails
	})
	deadline := time.Now().Add(3 * time.Minute)
	for {
		st, err := client.Status(context.Background())
		if err == nil && st.Session.State == session.StateRunning {
			break
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(root, "helper.log"))
			t.Fatalf("the helper's VM did not come up: %+v, %v\n%s", st.Session, err, b)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got := under(root); len(got) < 2 {
		t.Fatalf("processes of this test: %q; want the helper and its QEMU", got)
	}
	app.Process.Kill()
	app.Wait()
	killed := time.Now()
	for len(under(root)) > 0 {
		if time.Since(killed) > 30*time.Second {
			b, _ := os.ReadFile(filepath.Join(root, "helper.log"))
			t.Fatalf("30 s after the app was killed these still run: %q\nhelper log:\n%s", under(root), b)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("the helper and its VM ended %s after the app was killed", time.Since(killed).Round(time.Millisecond))
	if _, err := client.Status(context.Background()); err == nil {
		t.Error("the helper still answers")
	}
	b, _ := os.ReadFile(filepath.Join(root, "helper.log"))
	if !strings.Contains(string(b), "--parent-pid") || !strings.Contains(string(b), "ended; stopping") {
		t.Errorf("the helper did not say why it stopped:\n%s", b)
	}
}

// killUnder kills the processes that name root.
func killUnder(root string) {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(b), root) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil && pid != os.Getpid() {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// under lists the command lines of the processes that name root.
func under(root string) []string {
	var out []string
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), root) {
			out = append(out, strings.ReplaceAll(string(b), "\x00", " "))
		}
	}
	return out
}
