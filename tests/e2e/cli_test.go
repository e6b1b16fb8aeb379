//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/app/sandbox"
	"github.com/airlock-sandbox/airlock/guest/api"
)

// airlock runs the CLI and returns its exit code, stdout and stderr.
func airlock(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	// Every `run` keeps its console in the test's folder, so that a boot
	// that fails can be read (the default, in the user's cache folder, is
	// overwritten by the next run).
	if len(args) > 0 && args[0] == "run" && !slices.ContainsFunc(args, func(a string) bool {
		return a == "--console-log" || strings.HasPrefix(a, "--console-log=")
	}) {
		args = slices.Insert(args, 1, "--console-log="+filepath.Join(t.TempDir(), "console.log"))
	}
	cmd := exec.Command(airlockBin, args...)
	// A private runtime folder: no service is found, so run boots its own VM.
	cmd.Env = append(os.Environ(), "AIRLOCK_IMAGE_DIR="+imageRoot, "XDG_RUNTIME_DIR="+t.TempDir())
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run airlock: %v", err)
	}
	if code == 125 {
		logConsole(t, args)
	}
	return code, out.String(), errOut.String()
}

// TestRunTheIssueExample is the walking skeleton's promise, through the CLI:
// a real VM, stdin, separate streams, the workspace, the exit code.
func TestRunTheIssueExample(t *testing.T) {
	ws := newWorkspace(t)
	os.WriteFile(filepath.Join(ws, "report.md"), []byte("q3\n"), 0o644)
	console := filepath.Join(t.TempDir(), "console.log")
	code, out, errOut := airlock(t, "hi\n", "run", "--workspace", ws, "--console-log", console, "--",
		"sh", "-c", "ls /workspace; echo done > /workspace/out.txt; cat; echo oops >&2; exit 7")
	if code != 7 {
		t.Fatalf("exit code %d, want 7 (stderr %q)", code, errOut)
	}
	if out != "report.md\nhi\n" || !strings.Contains(errOut, "oops") || strings.Contains(out, "oops") {
		t.Fatalf("stdout %q stderr %q", out, errOut)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "out.txt")); err != nil || string(b) != "done\n" {
		t.Fatalf("out.txt on the host: %q %v", b, err)
	}
	if l := leftovers(console); l != "" {
		t.Fatalf("processes left behind: %s", l)
	}
	// The line the host's boot watch looks for (sandbox: a kernel that
	// never starts init is booted once more): a machine started from a
	// template prints the wake's instead, its boot's having gone to the
	// console of the machine that saved it.
	if b, _ := os.ReadFile(console); !strings.Contains(string(b), api.InitRunning) && !strings.Contains(string(b), api.Woken) {
		t.Errorf("the console has neither %q nor %q:\n%s", api.InitRunning, api.Woken, b)
	}
}

func TestRunStdinPipe(t *testing.T) {
	code, out, errOut := airlock(t, "hi\n", "run", "--", "cat")
	if code != 0 || out != "hi\n" {
		t.Fatalf("echo hi | airlock run -- cat: code %d out %q err %q", code, out, errOut)
	}
}

func TestRunExitCodes(t *testing.T) {
	code, _, errOut := airlock(t, "", "run", "--", "no-such-command")
	if code != 127 || !strings.Contains(errOut, "no-such-command") {
		t.Fatalf("missing command: code %d stderr %q", code, errOut)
	}
	code, _, errOut = airlock(t, "", "run", "--timeout", "2s", "--", "sleep", "600")
	if code != 124 || !strings.Contains(errOut, "timed out") {
		t.Fatalf("timeout: code %d stderr %q", code, errOut)
	}
}

func TestRunReadOnly(t *testing.T) {
	ws := newWorkspace(t)
	os.WriteFile(filepath.Join(ws, "in.txt"), []byte("keep me\n"), 0o644)
	code, out, errOut := airlock(t, "", "run", "--read-only", "--workspace", ws, "--",
		"sh", "-c", "cat /workspace/in.txt; echo x > /workspace/new.txt")
	if code == 0 || out != "keep me\n" || !strings.Contains(strings.ToLower(errOut), "read-only") {
		t.Fatalf("write in read-only mode: code %d out %q err %q", code, out, errOut)
	}
	// Even root in the guest cannot get around it: the host enforces it.
	code, _, errOut = airlock(t, "", "run", "--read-only", "--root", "--workspace", ws, "--",
		"sh", "-c", "mount -o remount,rw /workspace; echo x > /workspace/new.txt; rm /workspace/in.txt")
	if code == 0 {
		t.Fatalf("root wrote to a read-only workspace (stderr %q)", errOut)
	}
	if _, err := os.Stat(filepath.Join(ws, "new.txt")); err == nil {
		t.Fatalf("new.txt appeared on the host")
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "in.txt")); string(b) != "keep me\n" {
		t.Fatalf("in.txt changed: %q", b)
	}
}

func TestRunRefusesBadWorkspaces(t *testing.T) {
	file := filepath.Join(t.TempDir(), "notes.txt")
	os.WriteFile(file, []byte("x"), 0o644)
	home, _ := os.UserHomeDir()
	tests := []struct{ dir, want string }{
		{"/", "root of the file system"},
		{home, "home folder"},
		{"/etc", "system folder"},
		{file, "is a file"},
		{filepath.Join(t.TempDir(), "missing"), "does not exist"},
	}
	for _, tt := range tests {
		code, out, errOut := airlock(t, "", "run", "--workspace", tt.dir, "--", "true")
		if code != 125 || out != "" || !strings.Contains(errOut, tt.want) || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
			t.Errorf("--workspace %s: code %d stderr %q, want 125 and one line saying %q", tt.dir, code, errOut, tt.want)
		}
	}
	code, _, errOut := airlock(t, "", "run", "--image-dir", t.TempDir(), "--", "true")
	if code != 125 || !strings.Contains(errOut, "make image") {
		t.Errorf("missing image: code %d stderr %q", code, errOut)
	}
}

// TestRunNeverReady boots a guest whose init never signals readiness: the
// CLI must give up within its boot timeout with a clear error and leave no
// QEMU behind.
func TestRunNeverReady(t *testing.T) {
	console := filepath.Join(t.TempDir(), "console.log")
	began := time.Now()
	code, _, errOut := airlock(t, "", "run", "--boot-timeout", "10s", "--console-log", console,
		"--kernel-arg", "rdinit=/bin/busybox", "--kernel-arg", "--", "--kernel-arg", "sh", "--kernel-arg", "-c",
		"--kernel-arg", `"/bin/busybox sleep 600"`, "--", "true")
	if code != 125 || !strings.Contains(errOut, "did not become ready within 10s") {
		t.Fatalf("never-ready guest: code %d stderr %q", code, errOut)
	}
	if d := time.Since(began); d > 90*time.Second {
		t.Fatalf("gave up only after %s", d)
	}
	if l := leftovers(console); l != "" {
		t.Fatalf("processes left behind: %s", l)
	}
}

// TestRunCtrlC interrupts a running task: the task is killed, the VM shut
// down, no QEMU left, exit code 130.
func TestRunCtrlC(t *testing.T) {
	console := filepath.Join(t.TempDir(), "console.log")
	cmd := exec.Command(airlockBin, "run", "--console-log", console, "--", "sh", "-c", "echo started; sleep 600")
	cmd.Env = append(os.Environ(), "AIRLOCK_IMAGE_DIR="+imageRoot)
	stdout, _ := cmd.StdoutPipe()
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "started\n" {
		cmd.Process.Kill()
		cmd.Wait()
		logConsole(t, cmd.Args[1:])
		t.Fatalf("task did not start: %q %v %s", line, err, errOut.String())
	}
	cmd.Process.Signal(syscall.SIGINT)
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Fatalf("after Ctrl-C: %v (stderr %q)", err, errOut.String())
	}
	if l := leftovers(console); l != "" {
		t.Fatalf("processes left behind: %s", l)
	}
}

// TestRunKilledLeavesNoQEMU: when airlock itself is killed (SIGKILL, no
// cleanup), the kernel ends its QEMU, also when QEMU was started as the
// workspace's owner (the parent-death signal must survive the uid change).
func TestRunKilledLeavesNoQEMU(t *testing.T) {
	ws := newWorkspace(t)
	cmd := exec.Command(airlockBin, "run", "--workspace", ws, "--", "sh", "-c", "echo started; sleep 600")
	cmd.Env = append(os.Environ(), "AIRLOCK_IMAGE_DIR="+imageRoot)
	stdout, _ := cmd.StdoutPipe()
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "started\n" {
		cmd.Process.Kill()
		t.Fatalf("task did not start: %q %v %s", line, err, errOut.String())
	}
	if leftovers(ws) == "" {
		t.Fatal("no process holds the workspace while the task runs: leftovers cannot see QEMU")
	}
	cmd.Process.Kill()
	cmd.Wait()
	// The kernel sends QEMU SIGKILL at once; its exit may take a moment.
	l := leftovers(ws)
	for i := 0; i < 200 && l != ""; i++ {
		time.Sleep(100 * time.Millisecond)
		l = leftovers(ws)
	}
	if l != "" {
		t.Fatalf("processes outlived a killed airlock: %s", l)
	}
}

// TestRunRefusesBrokenImage: a damaged artifact is caught before boot.
func TestRunRefusesBrokenImage(t *testing.T) {
	src := sandbox.ImageDirUnder(imageRoot, sandbox.DefaultImage, runtime.GOARCH)
	dst := t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(e.Name(), "initramfs") {
			b[len(b)/2] ^= 0xff // one flipped byte
		}
		os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644)
	}
	code, _, errOut := airlock(t, "", "run", "--image-dir", dst, "--", "true")
	if code != 125 || !strings.Contains(errOut, "does not match its manifest") || !strings.Contains(errOut, "make image") {
		t.Fatalf("corrupt image: code %d stderr %q", code, errOut)
	}
	os.Remove(filepath.Join(dst, "initramfs.cpio"))
	code, _, errOut = airlock(t, "", "run", "--image-dir", dst, "--", "true")
	if code != 125 || !strings.Contains(errOut, "incomplete") {
		t.Fatalf("incomplete image: code %d stderr %q", code, errOut)
	}
}

// TestRunFolderTaskUserCannotEnter shares a root-owned 0700 folder as root:
// the task user (uid 1000) cannot enter /workspace, and the error must say
// so instead of blaming the program ("sh is not executable").
func TestRunFolderTaskUserCannotEnter(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("only root can share a folder the task user cannot enter (an ordinary user's own folder is the task user's)")
	}
	ws := filepath.Join(t.TempDir(), "private")
	if err := os.Mkdir(ws, 0o700); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := airlock(t, "", "run", "--workspace", ws, "--", "sh", "-c", "true")
	if code != 126 || !strings.Contains(errOut, "cannot enter the working directory /workspace") || strings.Contains(errOut, "not executable") {
		t.Fatalf("code %d stderr %q, want 126 and the folder named as the cause", code, errOut)
	}
	if code, out, errOut := airlock(t, "", "run", "--workspace", ws, "--root", "--", "sh", "-c", "echo ok"); code != 0 || out != "ok\n" {
		t.Fatalf("--root: code %d stdout %q stderr %q", code, out, errOut)
	}
}
