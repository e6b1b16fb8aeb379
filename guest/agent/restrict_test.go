//go:build linux

package agent

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// restrictHelperEnv makes the test binary, run as a restricted task, try
// one thing per argument and print what the kernel said.
const restrictHelperEnv = "AIRLOCK_RESTRICT_HELPER"

func init() {
	if os.Getenv(restrictHelperEnv) == "" {
		return
	}
	ws, other := os.Args[1], os.Args[2]
	try := func(name string, err error) {
		res := "ok"
		if err != nil {
			res = unix.ErrnoName(errors.Unwrap(err).(unix.Errno))
			if res == "" {
				res = err.Error()
			}
		}
		fmt.Printf("%s=%s\n", name, res)
	}
	sys := func(err error) error {
		if err != nil {
			return fmt.Errorf("%w", err)
		}
		return nil
	}
	for _, d := range []struct{ tag, dir string }{{"ws", ws}, {"other", other}} {
		f := filepath.Join(d.dir, "f")
		os.WriteFile(f, []byte("x"), 0o644)
		try(d.tag+".chmod4755", sys(unix.Chmod(f, 0o4755)))
		try(d.tag+".fchmodat2755", sys(unix.Fchmodat(unix.AT_FDCWD, f, 0o2755, 0)))
		try(d.tag+".chmod755", sys(unix.Chmod(f, 0o755)))
		ffd, _ := unix.Open(f, unix.O_RDONLY, 0)
		try(d.tag+".fchmod6755", sys(unix.Fchmod(ffd, 0o6755)))
		unix.Close(ffd)
		var st unix.Stat_t
		unix.Stat(f, &st)
		fmt.Printf("%s.mode=%o\n", d.tag, st.Mode&0o7777)
		fd, err := unix.Open(filepath.Join(d.dir, "c"), unix.O_CREAT|unix.O_WRONLY, 0o4755)
		unix.Close(fd)
		try(d.tag+".creat4755", sys(err))
		fd, err = unix.Open(filepath.Join(d.dir, "c2"), unix.O_CREAT|unix.O_WRONLY, 0o755)
		unix.Close(fd)
		try(d.tag+".creat755", sys(err))
		try(d.tag+".mknodreg4755", sys(unix.Mknod(filepath.Join(d.dir, "n"), unix.S_IFREG|0o4755, 0)))
		try(d.tag+".mkfifo", sys(unix.Mkfifo(filepath.Join(d.dir, "fifo"), 0o644)))
		l, err := net.Listen("unix", filepath.Join(d.dir, "sock"))
		if err == nil {
			l.Close()
		} else {
			var se *os.SyscallError
			if errors.As(err, &se) {
				err = fmt.Errorf("%w", se.Err)
			}
		}
		try(d.tag+".bind", err)
		os.Mkdir(filepath.Join(d.dir, "a"), 0o755)
		os.Mkdir(filepath.Join(d.dir, "b"), 0o755)
		os.WriteFile(filepath.Join(d.dir, "a", "m"), nil, 0o644)
		try(d.tag+".rename", sys(unix.Rename(filepath.Join(d.dir, "a", "m"), filepath.Join(d.dir, "b", "m"))))
		// A link that fits where it is made (pN/q/l -> ../../f), moved or
		// linked towards the top (EXDEV in the workspace), within its
		// folder, or deeper; each case with a link of its own.
		in := func(p string) string { return filepath.Join(d.dir, p) }
		mk := func(n string) string {
			os.MkdirAll(in(n+"/q"), 0o755)
			try(d.tag+".mv.make"+n, sys(unix.Symlink("../../f", in(n+"/q/l"))))
			return n
		}
		try(d.tag+".mv.link.up", sys(unix.Rename(in(mk("p1")+"/q/l"), in("p1/l"))))
		try(d.tag+".mv.hardlink.up", sys(unix.Link(in(mk("p2")+"/q/l"), in("hl"))))
		try(d.tag+".mv.hardlink.follow", sys(unix.Linkat(unix.AT_FDCWD, in(mk("p3")+"/q/l"), unix.AT_FDCWD, in("hf"), unix.AT_SYMLINK_FOLLOW)))
		try(d.tag+".mv.dir.up", sys(unix.Rename(in(mk("p4")+"/q"), in("q4"))))
		try(d.tag+".mv.dir.same", sys(unix.Rename(in(mk("p5")), in("p5b"))))
		os.Mkdir(in(mk("p6")+"/x"), 0o755)
		try(d.tag+".mv.dir.deeper", sys(unix.Rename(in("p6/q"), in("p6/x/q"))))
		if got, _ := os.Readlink(in("p6/x/q/l")); got != "../../f" {
			fmt.Printf("%s.mv.dir.deeper.target=%q\n", d.tag, got)
		}
		try(d.tag+".mv.link.same", sys(unix.Rename(in(mk("p7")+"/q/l"), in("p7/q/l2"))))
		os.WriteFile(in("g8"), nil, 0o644)
		try(d.tag+".mv.exchange.up", sys(unix.Renameat2(unix.AT_FDCWD, in("g8"), unix.AT_FDCWD, in(mk("p8")+"/q/l"), unix.RENAME_EXCHANGE)))
		try(d.tag+".mv.file", sys(unix.Renameat(unix.AT_FDCWD, in("hf"), unix.AT_FDCWD, in("p3/q/hf"))))
		try(d.tag+".mv.missing", sys(unix.Rename(in("nothing"), in("p1/nothing"))))
		try(d.tag+".mv.slash", sys(unix.Rename(in("p5b")+"/", in("p5c")+"/")))
		try(d.tag+".mv.slashfile", sys(unix.Rename(in("g8")+"/", in("g9"))))
		for _, l := range []struct{ tag, target, at string }{
			{"inside", "f", "l1"}, {"up", "../f", "a/l2"}, {"dot", "./a/../f", "l3"},
			{"abs", "/etc/passwd", "l4"}, {"escape", "../secret", "l5"}, {"deep", "../../../../secret", "a/l6"},
			{"after", "a/../../secret", "l7"},
		} {
			try(d.tag+".link."+l.tag, sys(unix.Symlink(l.target, filepath.Join(d.dir, l.at))))
		}
		dfd, _ := unix.Open(filepath.Join(d.dir, "a"), unix.O_PATH|unix.O_DIRECTORY, 0)
		try(d.tag+".linkat.up", sys(unix.Symlinkat("../f", dfd, "l8")))
		try(d.tag+".linkat.escape", sys(unix.Symlinkat("../../x", dfd, "l9")))
		unix.Close(dfd)
		if got, _ := os.Readlink(filepath.Join(d.dir, "a", "l8")); d.tag == "ws" && got != "../f" {
			fmt.Printf("%s.linkat.up.target=%q\n", d.tag, got)
		}
	}
	var params [30]uint32 // struct io_uring_params: 120 bytes
	_, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params)), 0)
	try("io_uring_setup", sys(errnoOrNil(e)))
	how := unix.OpenHow{Flags: unix.O_RDONLY}
	fd, err := unix.Openat2(unix.AT_FDCWD, "/", &how)
	unix.Close(fd)
	try("openat2", sys(err))
	os.Exit(0)
}

func errnoOrNil(e unix.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

// TestRestrictTask runs the test binary as a task restricted by
// restrictTask and checks what it may do: no setuid or setgid bits
// anywhere, special files refused beneath the workspace only (Landlock;
// everywhere without it, but then sockets are not refused), ordinary
// files, modes and renames untouched.
func TestRestrictTask(t *testing.T) {
	t.Run("as root", func(t *testing.T) { testRestrictTask(t, 0, false) })
	t.Run("as a user", func(t *testing.T) {
		if os.Getuid() != 0 {
			t.Skip("needs root to run the task as another user")
		}
		testRestrictTask(t, 1000, false)
	})
	// Guest root's tasks have no Landlock domain (forRoot): the filter
	// refuses special files everywhere in its place.
	t.Run("root's rules", func(t *testing.T) { testRestrictTask(t, 0, true) })
}

// testRestrictTask runs the helper as uid (with gid uid), under the rules
// for root's tasks when forRoot.
func testRestrictTask(t *testing.T, uid uint32, forRoot bool) {
	// The guest's workspace is a file system of its own; so is the test's
	// (links are guarded on the workspace's device).
	ws := t.TempDir()
	other := ""
	for _, d := range []string{"/dev/shm", "/run"} {
		var a, b unix.Stat_t
		if unix.Stat(d, &a) == nil && unix.Stat(ws, &b) == nil && a.Dev != b.Dev {
			if dir, err := os.MkdirTemp(d, "restrict-"); err == nil {
				other = dir
				t.Cleanup(func() { os.RemoveAll(dir) })
				break
			}
		}
	}
	if other == "" {
		t.Skip("no file system beside the test's temporary folder's")
	}
	rules, noLandlock, err := newTaskRules(ws, false)
	if err != nil {
		t.Fatal(err)
	}
	if noLandlock != nil {
		t.Logf("without Landlock: %v", noLandlock)
	}
	if forRoot {
		rules = rules.forRoot()
		if rules.ruleset >= 0 {
			t.Fatal("root's rules keep a Landlock domain")
		}
		noLandlock = errors.New("root's tasks have no Landlock domain")
	}
	cmd := exec.Command(os.Args[0], ws, other)
	cmd.Env = append(os.Environ(), restrictHelperEnv+"=1")
	if uid != 0 {
		// The test binary's folder is root's only: a copy the user can run.
		bin, err := os.ReadFile(os.Args[0])
		if err != nil {
			t.Fatal(err)
		}
		cmd.Path = filepath.Join(filepath.Dir(ws), "helper")
		if err := os.WriteFile(cmd.Path, bin, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, d := range []string{filepath.Dir(ws), ws, other} {
			os.Chown(d, int(uid), int(uid))
		}
		os.Chmod(filepath.Dir(ws), 0o755)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}}
	}
	out, served, err := runRestricted(rules, cmd)
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		k, v, _ := strings.Cut(l, "=")
		got[k] = v
	}
	special := "EACCES" // Landlock, in the workspace only
	want := map[string]string{
		"io_uring_setup": "ENOSYS", "openat2": "ENOSYS",
	}
	// In the workspace no setuid or setgid bit; elsewhere chmod sets them
	// (the agent does it for the task), a create's mode does not.
	want["ws.chmod4755"], want["ws.fchmodat2755"], want["ws.fchmod6755"], want["ws.mode"] = "EPERM", "EPERM", "EPERM", "755"
	want["other.chmod4755"], want["other.fchmodat2755"], want["other.fchmod6755"], want["other.mode"] = "ok", "ok", "ok", "6755"
	for _, tag := range []string{"ws", "other"} {
		want[tag+".creat4755"] = "EPERM"
		want[tag+".mknodreg4755"] = "EPERM"
		want[tag+".chmod755"] = "ok"
		want[tag+".creat755"] = "ok"
		want[tag+".rename"] = "ok"
		want[tag+".mkfifo"], want[tag+".bind"] = "ok", "ok"
		for _, l := range []string{"inside", "up", "dot", "abs", "escape", "deep", "after"} {
			want[tag+".link."+l] = "ok"
		}
		want[tag+".linkat.up"], want[tag+".linkat.escape"] = "ok", "ok"
		for _, m := range []string{"link.up", "hardlink.up", "hardlink.follow", "dir.up", "dir.same", "dir.deeper",
			"link.same", "exchange.up", "file", "slash"} {
			want[tag+".mv."+m] = "ok"
		}
		for i := 1; i <= 8; i++ {
			want[tag+".mv.makep"+strconv.Itoa(i)] = "ok"
		}
		want[tag+".mv.missing"], want[tag+".mv.slashfile"] = "ENOENT", "ENOTDIR"
	}
	// In the workspace no link moves, or gets a second name, towards the
	// top where it would climb out: EXDEV, so mv copies and makes it again.
	for _, m := range []string{"link.up", "hardlink.up", "dir.up", "exchange.up"} {
		want["ws.mv."+m] = "EXDEV"
	}
	// In the workspace, links stay inside it.
	// A `..` after a name is refused there too: the name may be a link.
	for _, l := range []string{"ws.link.abs", "ws.link.escape", "ws.link.deep", "ws.link.after", "ws.linkat.escape", "ws.link.dot"} {
		want[l] = "EPERM"
	}
	if noLandlock != nil {
		want["ws.mkfifo"], want["other.mkfifo"] = "EPERM", "EPERM"
	} else {
		want["ws.mkfifo"], want["ws.bind"] = special, special
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: got %q, want %q", k, got[k], w)
		}
	}
	if t.Failed() {
		t.Logf("helper output:\n%s", out)
	}
	// Once no task uses the filter, its listener's server ends.
	select {
	case <-served:
	case <-time.After(10 * time.Second):
		t.Error("the links' server still runs after its task ended")
	}
	// The test's own threads are untouched.
	f := filepath.Join(other, "parent")
	os.WriteFile(f, nil, 0o644)
	if err := unix.Chmod(f, 0o4755); err != nil {
		t.Errorf("the restricting goroutine's restrictions reached another thread: %v", err)
	}
}

// runRestricted runs cmd as a task restricted by rules, its calls served
// by serveCalls, and returns its output; served is closed once the
// listener's server has ended.
func runRestricted(rules taskRules, cmd *exec.Cmd) (out []byte, served <-chan struct{}, err error) {
	done := make(chan error, 1)
	ended := make(chan struct{})
	var restricted func()
	restricted = func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		if unix.Gettid() == unix.Getpid() {
			// As restrictedStart: the main thread would be wedged, not ended.
			next := make(chan struct{})
			go func() { restricted(); close(next) }()
			<-next
			runtime.UnlockOSThread()
			return
		}
		listener, err := restrictTask(rules)
		if err != nil {
			done <- err
			return
		}
		if listener < 0 {
			done <- errors.New("no listener for the links")
			return
		}
		go func() {
			serveCalls(listener, rules.ws)
			close(ended)
		}()
		out, err = cmd.CombinedOutput()
		done <- err
	}
	go restricted()
	err = <-done
	return out, ended, err
}
