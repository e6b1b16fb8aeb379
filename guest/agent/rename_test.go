//go:build linux

package agent

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// renameBenchEnv makes the test binary rename a file back and forth
// AIRLOCK_RENAME_BENCH times in the folder given as its argument, in
// the way its second argument names ("mkdir": make that many folders),
// and print the nanoseconds it took.
const renameBenchEnv = "AIRLOCK_RENAME_BENCH"

func init() {
	n, err := strconv.Atoi(os.Getenv(renameBenchEnv))
	if err != nil {
		return
	}
	dir, how := os.Args[1], os.Args[2]
	a, b := filepath.Join(dir, "x"), filepath.Join(dir, "y")
	if how == "across" {
		os.Mkdir(filepath.Join(dir, "d1"), 0o755)
		os.Mkdir(filepath.Join(dir, "d2"), 0o755)
		a, b = filepath.Join(dir, "d1", "x"), filepath.Join(dir, "d2", "x")
	}
	if err := os.WriteFile(a, nil, 0o644); err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	start := time.Now()
	if how == "mkdir" {
		for i := 0; i < n; i++ {
			if err := unix.Mkdir(filepath.Join(dir, strconv.Itoa(i)), 0o755); err != nil {
				fmt.Println(err)
				os.Exit(1)
			}
		}
		fmt.Println(time.Since(start).Nanoseconds())
		os.Exit(0)
	}
	for i := 0; i < n; i++ {
		if err := unix.Rename(a, b); err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		a, b = b, a
	}
	fmt.Println(time.Since(start).Nanoseconds())
	os.Exit(0)
}

// BenchmarkRename measures a rename in the workspace done by the agent for
// a restricted task (rename.go), within one folder and between two, and
// a mkdir done by it (with RefuseToolNames), and reports each as a
// multiple of the plain call measured in the same run: x-plain.
func BenchmarkRename(b *testing.B) {
	for _, how := range []string{"same", "across", "mkdir"} {
		b.Run(how, func(b *testing.B) {
			ws := b.TempDir()
			rules, _, err := newTaskRules(ws, how == "mkdir")
			if err != nil {
				b.Fatal(err)
			}
			run := func(restricted bool) float64 {
				dir, err := os.MkdirTemp(ws, "r")
				if err != nil {
					b.Fatal(err)
				}
				cmd := exec.Command(os.Args[0], dir, how)
				cmd.Env = append(os.Environ(), renameBenchEnv+"="+strconv.Itoa(b.N))
				var out []byte
				if restricted {
					out, _, err = runRestricted(rules, cmd)
				} else {
					out, err = cmd.CombinedOutput()
				}
				ns, perr := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
				if err != nil || perr != nil {
					b.Fatalf("%v %v: %s", err, perr, out)
				}
				return ns / float64(b.N)
			}
			plain := run(false)
			agent := run(true)
			b.ReportMetric(plain, "plain-ns/call")
			b.ReportMetric(agent, "ns/call")
			b.ReportMetric(agent/plain, "x-plain")
		})
	}
}

// toolNamesHelperEnv makes the test binary, as a restricted task, try to
// make the tool configuration's names in the workspace (its first
// argument) and elsewhere (its second), printing what the kernel said.
const toolNamesHelperEnv = "AIRLOCK_TOOLNAMES_HELPER"

func init() {
	if os.Getenv(toolNamesHelperEnv) == "" {
		return
	}
	ws, other := os.Args[1], os.Args[2]
	unix.Umask(0o002)
	try := func(name string, err error) {
		res := "ok"
		if e, ok := err.(unix.Errno); ok {
			res = unix.ErrnoName(e)
		} else if err != nil {
			res = err.Error()
		}
		fmt.Printf("%s=%s\n", name, res)
	}
	in := func(p string) string { return filepath.Join(ws, p) }
	try("mkdir.git", unix.Mkdir(in(".git"), 0o777))
	try("mkdir.vscode", unix.Mkdir(in(".vscode"), 0o777))
	dfd, _ := unix.Open(ws, unix.O_PATH|unix.O_DIRECTORY, 0)
	try("mkdirat.idea", unix.Mkdirat(dfd, ".idea", 0o777))
	try("mkdir.sub", unix.Mkdir(in("sub"), 0o777))
	var st unix.Stat_t
	unix.Stat(in("sub"), &st)
	fmt.Printf("mkdir.sub.mode=%o\n", st.Mode&0o7777)
	try("mkdir.again", unix.Mkdir(in("sub"), 0o777))
	try("mkdir.sub.git", unix.Mkdir(in("sub/.git"), 0o777))
	os.WriteFile(in("sub/f"), []byte("x"), 0o644)
	try("symlink.git", unix.Symlink("sub", in(".git")))
	try("rename.envrc", unix.Rename(in("sub/f"), in(".envrc")))
	try("rename.dir.git", unix.Rename(in("sub/.git"), in(".git")))
	try("link.envrc", unix.Link(in("sub/f"), in(".envrc")))
	try("rename.sub.envrc", unix.Rename(in("sub/f"), in("sub/.envrc")))
	try("mkdir.other.git", unix.Mkdir(filepath.Join(other, ".git"), 0o777))
	os.Exit(0)
}

// TestRefuseToolNames: with RefuseToolNames a task cannot make .git,
// .envrc, .vscode or .idea at the workspace's top, by mkdir, symlink,
// rename or link; below the top and outside the workspace it can, and a
// mkdir the agent does for it has the task's umask.
func TestRefuseToolNames(t *testing.T) {
	for _, uid := range []uint32{0, 1000} {
		t.Run(fmt.Sprintf("uid %d", uid), func(t *testing.T) {
			if uid != 0 && os.Getuid() != 0 {
				t.Skip("needs root to run the task as another user")
			}
			root := t.TempDir()
			ws, other := filepath.Join(root, "ws"), filepath.Join(root, "other")
			os.Mkdir(ws, 0o755)
			os.Mkdir(other, 0o755)
			rules, _, err := newTaskRules(ws, true)
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(os.Args[0], ws, other)
			cmd.Env = append(os.Environ(), toolNamesHelperEnv+"=1")
			if uid != 0 {
				bin, err := os.ReadFile(os.Args[0])
				if err != nil {
					t.Fatal(err)
				}
				cmd.Path = filepath.Join(root, "helper")
				if err := os.WriteFile(cmd.Path, bin, 0o755); err != nil {
					t.Fatal(err)
				}
				for _, d := range []string{ws, other} {
					os.Chown(d, int(uid), int(uid))
				}
				os.Chmod(root, 0o755)
				os.Chmod(filepath.Dir(root), 0o755)
				cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}}
			}
			out, _, err := runRestricted(rules, cmd)
			if err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			want := map[string]string{
				"mkdir.git": "EPERM", "mkdir.vscode": "EPERM", "mkdirat.idea": "EPERM",
				"mkdir.sub": "ok", "mkdir.sub.mode": "775", "mkdir.again": "EEXIST", "mkdir.sub.git": "ok",
				"symlink.git": "EPERM", "rename.envrc": "EPERM", "rename.dir.git": "EPERM", "link.envrc": "EPERM",
				"rename.sub.envrc": "ok", "mkdir.other.git": "ok",
			}
			for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
				k, v, _ := strings.Cut(l, "=")
				if w, ok := want[k]; !ok || v != w {
					t.Errorf("%s: got %q, want %q", k, v, w)
				}
				delete(want, k)
			}
			for k := range want {
				t.Errorf("%s: not tried", k)
			}
			for _, n := range []string{".git", ".envrc", ".vscode", ".idea"} {
				if _, err := os.Lstat(filepath.Join(ws, n)); err == nil {
					t.Errorf("%s was made at the workspace's top", n)
				}
			}
		})
	}
}
