//go:build e2e

package e2e

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/cgi"
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
	"github.com/airlock-sandbox/airlock/app/workspace"
	"github.com/airlock-sandbox/airlock/guest/client"
	"github.com/airlock-sandbox/airlock/images/manifest"
	"github.com/airlock-sandbox/airlock/tests/internal/vmharness"
)

// The standard image's scenarios share one booted standard VM (started by
// the first test that needs it, stopped by runMain), behind its own gate.
var std struct {
	once sync.Once
	sb   *sandbox.Sandbox
	gate *egress.Gate
	ws   string
	err  error
}

// pythonPreset is the UI's "Python packages" preset (frontend/src/views/network.ts).
var pythonPreset = []string{"pypi.org", "files.pythonhosted.org"}

// standardPolicy allows the Python preset and two names pinned to the host,
// where the tests serve a package index and a git repository.
var standardPolicy = egress.Config{
	Allow:    append([]string{"pypi.test", "git.test"}, pythonPreset...),
	MapHosts: []string{"pypi.test=127.0.0.1", "git.test=127.0.0.1"},
}

// standardDir is the standard image the product boots here (on a Linux
// amd64 host the one with the kernel built from linux-source, when built).
func standardDir() string {
	return sandbox.ImageDirUnder(imageRoot, manifest.ImageStandard, runtime.GOARCH)
}

// standardVM boots the shared standard VM once.
func standardVM(t *testing.T) *sandbox.Sandbox {
	t.Helper()
	std.once.Do(func() {
		img, err := sandbox.LoadImage(standardDir())
		if err != nil {
			std.err = fmt.Errorf("%w (build it with make image-standard)", err)
			return
		}
		if img.RootDisk == "" {
			std.err = fmt.Errorf("%s is not the standard image: no root disk", standardDir())
			return
		}
		if std.ws, err = os.MkdirTemp("", "airlock-e2e-std-"); err != nil {
			std.err = err
			return
		}
		std.ws = ownedByTaskUser(std.ws)
		if std.gate, err = egress.New(standardPolicy); err != nil {
			std.err = err
			return
		}
		uid, gid := workspace.Owner(std.ws)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		began := time.Now()
		console := consoleLog("standard")
		std.sb, std.err = sandbox.Start(ctx, sandbox.Options{
			Workspace: std.ws, Image: img, UID: uid, GID: gid, MemoryMiB: 1024, Egress: std.gate,
			BootTimeout: 4 * time.Minute, ConsoleLog: console,
			Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})),
		})
		if std.err == nil {
			fmt.Fprintf(os.Stderr, "e2e: standard VM ready in %s\n", time.Since(began).Round(time.Millisecond))
		} else {
			reportBootFailure("the standard VM", console)
		}
	})
	if std.err != nil {
		t.Fatalf("standard VM: %v", std.err)
	}
	return std.sb
}

// closeStandardVM stops the shared standard VM if a test started it.
func closeStandardVM() error {
	if std.sb == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := std.sb.Close(ctx)
	std.gate.Close()
	os.RemoveAll(std.ws)
	return err
}

// stdSh runs a shell command as the task user on the standard VM, with
// the proxy settings a task gets from the service.
func stdSh(t *testing.T, cmd string) result {
	t.Helper()
	sb := standardVM(t)
	id := newTaskID()
	user, pass := std.gate.Credentials(id)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	exit, err := sb.Agent().Exec(ctx, client.Spec{ID: id, Argv: []string{"bash", "-c", cmd}, Env: egress.ProxyEnv(user, pass)},
		client.Stdio{Stdout: &out, Stderr: &errOut})
	if err != nil {
		t.Fatalf("exec %q: %v (stderr %q)", cmd, err, errOut.String())
	}
	return result{Exit: exit, Stdout: out.String(), Stderr: errOut.String()}
}

func mustOK(t *testing.T, r result, what string) {
	t.Helper()
	if r.Exit.Code != 0 || r.Exit.Signal != 0 {
		t.Fatalf("%s: exit %+v\nstdout: %s\nstderr: %s", what, r.Exit, r.Stdout, r.Stderr)
	}
}

// TestStandardIsDebian: the root is Debian from the read-only disk under
// an overlay, the tools are there, and the task user has a normal home.
func TestStandardIsDebian(t *testing.T) {
	r := stdSh(t, `set -e
. /etc/os-release; echo "os=$ID-$VERSION_CODENAME"
echo "user=$(id -u):$(id -g) home=$HOME path=$PATH"
awk '$2=="/" {print "rootfs="$3}' /proc/mounts
for c in python3 pip3 git curl jq sqlite3 unzip file; do command -v $c >/dev/null || { echo "missing $c"; exit 1; }; done
python3 -c 'import sqlite3, ssl, venv, zlib, json, xml.etree.ElementTree; print("python", ssl.OPENSSL_VERSION.split()[0])'
echo '{"a":[1,2]}' | jq -c '.a'
echo hi > ~/note && cat ~/note
if touch /usr/bin/x 2>/dev/null; then echo "user wrote /usr/bin"; exit 1; fi
ls /usr/lib/x86_64-linux-gnu/libxml2.so.2 /usr/lib/*/libjpeg.so.62 >/dev/null
`)
	mustOK(t, r, "tools")
	ids := fmt.Sprintf("user=%d:%d home=/home/agent", vmharness.UserUID(), vmharness.UserUID())
	for _, want := range []string{"os=debian-bookworm", ids, "rootfs=overlay", "python OpenSSL", "[1,2]", "hi\n"} {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.Stdout)
		}
	}
	// The base disk is read-only even for root; root writes land in the
	// in-memory layer, and the block device itself refuses writes.
	rr, err := rootSh(t, `touch /usr/bin/airlock-was-here && echo upper-ok
for d in /sys/block/vd*; do [ "$(cat $d/ro)" = 1 ] && echo "ro-disk=${d##*/}" && base=/dev/${d##*/}; done
dd if=/dev/zero of=$base bs=512 count=1 conv=notrunc 2>/dev/null && echo WROTE-BASE; true`)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rr.Stdout, "upper-ok") || !strings.Contains(rr.Stdout, "ro-disk=vd") || strings.Contains(rr.Stdout, "WROTE-BASE") {
		t.Fatalf("root and the base disk: %+v\n%s\n%s", rr.Exit, rr.Stdout, rr.Stderr)
	}
}

// rootSh runs cmd as root on the standard VM.
func rootSh(t *testing.T, cmd string) (result, error) {
	t.Helper()
	sb := standardVM(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	exit, err := sb.Agent().Exec(ctx, client.Spec{Argv: []string{"bash", "-c", cmd}, Root: true}, client.Stdio{Stdout: &out, Stderr: &errOut})
	return result{Exit: exit, Stdout: out.String(), Stderr: errOut.String()}, err
}

// buildWheel zips a minimal pure-Python wheel by hand (PEP 427): a
// module, METADATA, WHEEL, a console script and a RECORD with the files'
// hashes.
func buildWheel(t *testing.T, name, version, code string) []byte {
	t.Helper()
	dist := name + "-" + version + ".dist-info"
	files := []struct{ path, body string }{
		{name + "/__init__.py", code},
		{dist + "/METADATA", "Metadata-Version: 2.1\nName: " + strings.ReplaceAll(name, "_", "-") + "\nVersion: " + version + "\n"},
		{dist + "/WHEEL", "Wheel-Version: 1.0\nGenerator: airlock-e2e\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
		{dist + "/entry_points.txt", "[console_scripts]\n" + strings.ReplaceAll(name, "_", "-") + " = " + name + ":main\n"},
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	var record strings.Builder
	for _, f := range files {
		w, err := zw.Create(f.path)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(f.body))
		sum := sha256.Sum256([]byte(f.body))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f.path, base64.RawURLEncoding.EncodeToString(sum[:]), len(f.body))
	}
	record.WriteString(dist + "/RECORD,,\n")
	w, _ := zw.Create(dist + "/RECORD")
	w.Write([]byte(record.String()))
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestStandardPipInstallThroughGate: pip installs a package from a
// package index on the host (PEP 503 simple index), through the guest's
// proxy and the host's gate, and Python imports it.
func TestStandardPipInstallThroughGate(t *testing.T) {
	wheel := buildWheel(t, "airlock_demo", "1.0", "def hello():\n    return 'hello from a wheel'\n\ndef main():\n    print('command', hello())\n")
	file := "airlock_demo-1.0-py3-none-any.whl"
	sum := sha256.Sum256(wheel)
	var mu sync.Mutex
	var hits []string
	mux := http.NewServeMux()
	mux.HandleFunc("/simple/airlock-demo/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `<!DOCTYPE html><html><body><a href="/files/%s#sha256=%s">%s</a></body></html>`, file, hex.EncodeToString(sum[:]), file)
	})
	mux.HandleFunc("/files/"+file, func(w http.ResponseWriter, r *http.Request) { w.Write(wheel) })
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits = append(hits, r.URL.Path)
		mu.Unlock()
		mux.ServeHTTP(w, r)
	}))
	defer srv.Close()
	index := "http://pypi.test:" + port(srv) + "/simple/"

	r := stdSh(t, fmt.Sprintf(`set -e
pip install --no-cache-dir --disable-pip-version-check --index-url %s --trusted-host pypi.test airlock-demo 2>&1 | tail -3
python3 -c 'import airlock_demo; print(airlock_demo.hello())'
airlock-demo`, index))
	mustOK(t, r, "pip install")
	// The import works, and the package's command is on the task's PATH.
	if !strings.Contains(r.Stdout, "\nhello from a wheel\ncommand hello from a wheel\n") {
		t.Fatalf("the installed package does not import:\n%s\n%s", r.Stdout, r.Stderr)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(strings.Join(hits, " "), "/files/"+file) {
		t.Fatalf("the index never served the wheel (requests: %v)", hits)
	}
	// The same index under a name the gate does not allow is refused.
	r = stdSh(t, fmt.Sprintf(`pip download --no-cache-dir --disable-pip-version-check --retries 0 --timeout 20 -d /tmp/dl --index-url http://pypi.example:%s/simple/ --trusted-host pypi.example airlock-demo 2>&1; echo rc=$?`, port(srv)))
	if strings.Contains(r.Stdout, "rc=0") {
		t.Fatalf("pip reached an index the gate does not allow:\n%s", r.Stdout)
	}
}

// TestStandardGitCloneThroughGate: git clones over smart HTTP from git
// http-backend on the host (behind Go's CGI handler), through the gate.
func TestStandardGitCloneThroughGate(t *testing.T) {
	gitBin, err := exec.LookPath("git")
	if err != nil {
		t.Fatal("git is needed on the host for the git server (apt: git)")
	}
	root := t.TempDir()
	work := filepath.Join(root, "work")
	git := func(dir string, args ...string) {
		t.Helper()
		cmd := exec.Command(gitBin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=e2e", "GIT_AUTHOR_EMAIL=e2e@test", "GIT_COMMITTER_NAME=e2e", "GIT_COMMITTER_EMAIL=e2e@test")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	os.MkdirAll(work, 0o755)
	git(work, "init", "-q", "-b", "main")
	os.WriteFile(filepath.Join(work, "README.md"), []byte("cloned through the gate\n"), 0o644)
	git(work, "add", ".")
	git(work, "commit", "-q", "-m", "first")
	git(root, "clone", "-q", "--bare", work, filepath.Join(root, "repo.git"))

	var mu sync.Mutex
	var hits []string
	backend := &cgi.Handler{
		Path: gitBin, Args: []string{"http-backend"}, Root: "/git",
		Env: []string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits = append(hits, r.URL.Path)
		mu.Unlock()
		backend.ServeHTTP(w, r)
	}))
	defer srv.Close()

	r := stdSh(t, fmt.Sprintf(`set -e
cd /tmp && rm -rf repo && git clone -q http://git.test:%s/git/repo.git repo
cat repo/README.md; git -C repo log --format=%%s`, port(srv)))
	mustOK(t, r, "git clone")
	if r.Stdout != "cloned through the gate\nfirst\n" {
		t.Fatalf("clone gave %q (stderr %q)", r.Stdout, r.Stderr)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(strings.Join(hits, " "), "git-upload-pack") {
		t.Fatalf("no smart-HTTP fetch reached the server (requests: %v)", hits)
	}
}

// stdCLI runs the CLI with its own state folder (persistent disks).
func stdCLI(t *testing.T, state string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(airlockBin, args...)
	cmd.Env = append(os.Environ(), "AIRLOCK_IMAGE_DIR="+imageRoot, "XDG_RUNTIME_DIR="+t.TempDir(), "XDG_STATE_HOME="+state)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), out.String(), errOut.String()
	} else if err != nil {
		t.Fatalf("run airlock: %v", err)
	}
	return 0, out.String(), errOut.String()
}

// TestStandardCLI: `airlock run --image standard -- python3 -c ...` boots
// its own VM from the real binary; each boot starts clean unless the
// workspace's persistent disk is asked for, which reset-disk wipes.
func TestStandardCLI(t *testing.T) {
	if _, err := os.Stat(filepath.Join(standardDir(), "manifest.json")); err != nil {
		t.Fatalf("no standard image in %s: build it with make image-standard", standardDir())
	}
	ws := newWorkspace(t)
	state := t.TempDir()
	code, out, errOut := stdCLI(t, state, "run", "--image", "standard", "-w", ws, "--boot-timeout", "4m", "--",
		"python3", "-c", "import sys, pathlib; pathlib.Path('/workspace/py.txt').write_text('py%d' % sys.version_info[0]); print('hello from', sys.platform)")
	if code != 0 || out != "hello from linux\n" {
		t.Fatalf("run --image standard: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "py.txt")); string(b) != "py3" {
		t.Fatalf("workspace file %q", b)
	}

	keep := []string{"run", "--image", "standard", "--keep-disk", "-w", ws, "--boot-timeout", "4m", "--", "sh", "-c"}
	code, out, errOut = stdCLI(t, state, append(keep, "cat ~/kept 2>/dev/null; echo kept > ~/kept")...)
	if code != 0 || out != "" {
		t.Fatalf("first --keep-disk run: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, errOut = stdCLI(t, state, append(keep, "cat ~/kept")...)
	if code != 0 || out != "kept\n" {
		t.Fatalf("second --keep-disk run does not see the first's file: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, errOut = stdCLI(t, state, "run", "--image", "standard", "-w", ws, "--boot-timeout", "4m", "--", "sh", "-c", "cat ~/kept || echo clean")
	if code != 0 || out != "clean\n" {
		t.Fatalf("a run without --keep-disk sees the persistent disk: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, errOut = stdCLI(t, state, "workspace", "reset-disk", ws)
	if code != 0 || !strings.Contains(out, "reset") {
		t.Fatalf("reset-disk: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, out, errOut = stdCLI(t, state, append(keep, "cat ~/kept || echo clean")...)
	if code != 0 || out != "clean\n" {
		t.Fatalf("after reset-disk: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	code, _, errOut = stdCLI(t, state, "run", "--image", "nonesuch", "--", "true")
	if code != 125 || !strings.Contains(errOut, "minimal or standard") {
		t.Fatalf("--image nonesuch: exit %d, stderr %q", code, errOut)
	}
}
