// Package vmharness is what the suites under tests/ share to drive the real
// guest: the binaries make hands them, workspace folders owned like a user's
// folder, booting a sandbox on the real image, running tasks in it, and the
// probe program (testdata/probe) that tasks run to try things a shell cannot.
//
// The suites (e2e, security, bench, …) each boot what they need; this
// package holds no state about them.
package vmharness

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/app/sandbox"
	"github.com/airlock-sandbox/airlock/app/workspace"
	"github.com/airlock-sandbox/airlock/guest/client"
)

// Env is what `make test-e2e` and friends pass to a suite.
type Env struct {
	Bin       string        // AIRLOCK_E2E_BIN: the airlock CLI under test
	ImageRoot string        // AIRLOCK_IMAGE_DIR: images/out
	Image     sandbox.Image // this host's architecture's image, verified
}

// FromEnv reads the suite's environment and loads the guest image; the
// error says which make target sets it.
func FromEnv(suite string) (Env, error) {
	e := Env{Bin: os.Getenv("AIRLOCK_E2E_BIN"), ImageRoot: os.Getenv("AIRLOCK_IMAGE_DIR")}
	if e.Bin == "" || e.ImageRoot == "" {
		return e, fmt.Errorf("%s: set AIRLOCK_E2E_BIN and AIRLOCK_IMAGE_DIR (make test-%s does)", suite, suite)
	}
	img, err := sandbox.LoadImage(sandbox.ImageDirUnder(e.ImageRoot, sandbox.DefaultImage, runtime.GOARCH))
	if err != nil {
		return e, fmt.Errorf("%s: %w", suite, err)
	}
	e.Image = img
	return e, nil
}

// TaskUID is the uid a user's folder belongs to when the suites run as root.
const TaskUID = 1000

// UserUID is the uid of the guest's task user, which Airlock gives the
// shared folder's owner: TaskUID when the suites run as root (they give
// their folders to it), else the uid of the user running them.
func UserUID() uint32 {
	if os.Getuid() == 0 {
		return TaskUID
	}
	return uint32(os.Getuid())
}

// OwnedByTaskUser makes dir belong to uid 1000 when the tests run as root,
// as a user's own folder would (the guest's task user then gets that uid),
// and returns it canonicalised, as Airlock shares it.
func OwnedByTaskUser(dir string) string {
	if os.Getuid() == 0 {
		_ = os.Chown(dir, TaskUID, TaskUID)
	}
	canon, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return dir
	}
	return canon
}

// NewWorkspace returns a fresh workspace folder owned like a user's folder,
// removed when t ends.
func NewWorkspace(t testing.TB) string {
	t.Helper()
	return OwnedByTaskUser(t.TempDir())
}

// Boot starts a sandbox on o.Workspace with the image, running tasks as the
// workspace owner (as the CLI does). A nil o.Logger logs warnings to stderr.
func Boot(ctx context.Context, img sandbox.Image, o sandbox.Options) (*sandbox.Sandbox, error) {
	o.Image = img
	if o.Workspace != "" && o.UID == 0 {
		o.UID, o.GID = workspace.Owner(o.Workspace)
	}
	if o.Logger == nil {
		o.Logger = Logger(slog.LevelWarn)
	}
	return sandbox.Start(ctx, o)
}

// Logger is a text logger on stderr at level.
func Logger(level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// Close shuts sb down, giving it 30 s.
func Close(sb *sandbox.Sandbox) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return sb.Close(ctx)
}

// Result is what a task printed and how it ended.
type Result struct {
	Exit           client.Exit
	Stdout, Stderr string
}

func (r Result) String() string {
	return fmt.Sprintf("exit %d signal %d stdout %q stderr %q", r.Exit.Code, r.Exit.Signal, r.Stdout, r.Stderr)
}

// Out is stdout and stderr together.
func (r Result) Out() string { return r.Stdout + r.Stderr }

// Shell is the spec of `sh -c cmd` as the task user.
func Shell(cmd string) client.Spec { return client.Spec{Argv: []string{"sh", "-c", cmd}} }

// Exec runs spec on sb (stdin may be nil) and returns what it printed; an
// error of the agent (not the command's exit status) fails t.
func Exec(t testing.TB, sb *sandbox.Sandbox, spec client.Spec, stdin io.Reader) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	exit, err := sb.Agent().Exec(ctx, spec, client.Stdio{Stdin: stdin, Stdout: &out, Stderr: &errOut})
	if err != nil {
		t.Fatalf("exec %v %q: %v (stderr %q)", spec.Argv, spec.Shell, err, errOut.String())
	}
	return Result{exit, out.String(), errOut.String()}
}

// ProbeDir is the probe program's source folder.
func ProbeDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "testdata", "probe")
}

var built sync.Map // destination path -> *probeBuild

type probeBuild struct {
	once sync.Once
	err  error
}

// BuildProbe builds the probe, static, for this architecture's guest to
// dst (once per dst per test binary) and makes it executable by everyone.
func BuildProbe(dst string) error {
	v, _ := built.LoadOrStore(dst, &probeBuild{})
	b := v.(*probeBuild)
	b.once.Do(func() { b.err = BuildGuest(ProbeDir(), dst) })
	return b.err
}

// BuildGuest builds the Go program in dir as a static binary for this
// architecture's guest to dst.
func BuildGuest(dir, dst string) error {
	dst, err := filepath.Abs(dst)
	if err != nil {
		return err
	}
	cmd := exec.Command("go", "build", "-trimpath", "-o", dst, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build %s: %v\n%s", dir, err, out)
	}
	return os.Chmod(dst, 0o755)
}

// Leftovers lists processes that name s in their command line or hold a
// file under s open: QEMU started as the folder's owner gets the workspace
// and the console log as descriptors, so its command line names neither.
func Leftovers(s string) string {
	ents, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		dir := filepath.Join("/proc", e.Name())
		b, _ := os.ReadFile(filepath.Join(dir, "cmdline"))
		cmdline := strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
		hit := strings.Contains(cmdline, s)
		if !hit {
			fds, _ := os.ReadDir(filepath.Join(dir, "fd"))
			for _, fd := range fds {
				if target, err := os.Readlink(filepath.Join(dir, "fd", fd.Name())); err == nil && strings.Contains(target, s) {
					hit = true
					break
				}
			}
		}
		if hit {
			out = append(out, e.Name()+" "+cmdline)
		}
	}
	return strings.Join(out, "\n")
}

// ConsoleTail returns at most the last max bytes of the guest console at
// path, for a failure message: a guest that never became ready says why
// only there.
func ConsoleTail(path string, max int64) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	from := fi.Size() - max
	if from < 0 {
		from = 0
	}
	b, err := io.ReadAll(io.NewSectionReader(f, from, fi.Size()-from))
	return string(b), err
}

// ResidentKiB is process pid's resident memory (VmRSS), in KiB.
func ResidentKiB(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			return strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", pid)
}
