//go:build e2e

package security

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/app/api"
	"github.com/airlock-sandbox/airlock/app/egress"
	"github.com/airlock-sandbox/airlock/tests/internal/vmharness"
)

const ctlFamily = "host control"

// serve is one `airlock serve --http 127.0.0.1:0 --no-boot` with its own
// XDG folders under root (0755, so only the folders Airlock makes guard it).
type serve struct {
	root, sock, url, token, addr string
	env                          []string
	cmd                          *exec.Cmd
}

func startServe(t *testing.T) *serve {
	t.Helper()
	root, err := os.MkdirTemp("", "airlock-sec-ctl-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	os.Chmod(root, 0o755)
	s := &serve{root: root, sock: filepath.Join(root, "run", "airlock", "airlock.sock")}
	s.env = append(os.Environ(), "AIRLOCK_IMAGE_DIR="+imageRoot,
		"XDG_RUNTIME_DIR="+filepath.Join(root, "run"), "XDG_CONFIG_HOME="+filepath.Join(root, "config"),
		"XDG_STATE_HOME="+filepath.Join(root, "state"), "XDG_CACHE_HOME="+filepath.Join(root, "cache"))
	for _, d := range []string{"run", "config", "state", "cache"} {
		os.Mkdir(filepath.Join(root, d), 0o755)
	}
	s.cmd = exec.Command(airlockBin, "serve", "--no-boot", "--http", "127.0.0.1:0")
	s.cmd.Env = s.env
	stderr, _ := s.cmd.StderrPipe()
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.cmd.Process.Signal(syscall.SIGINT)
		done := make(chan struct{})
		go func() { s.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			s.cmd.Process.Kill()
		}
	})
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := regexp.MustCompile(`(http://[^/ ]+)/\?token=(\S+)`).FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1] + " " + m[2]
			}
		}
		io.Copy(io.Discard, stderr)
	}()
	select {
	case f := <-found:
		s.url, s.token, _ = strings.Cut(f, " ")
		s.addr = strings.TrimPrefix(s.url, "http://")
	case <-time.After(30 * time.Second):
		t.Fatal("airlock serve printed no URL")
	}
	c := api.NewClient(s.sock)
	for i := 0; c.Ping(context.Background()) != nil; i++ {
		if i > 200 {
			t.Fatal("airlock serve does not answer on its socket")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return s
}

// curl runs curl as uid (0: this user) and returns the HTTP status it got
// ("000" when the connection failed or was dropped) and the body.
func curl(uid uint32, args ...string) (string, string) {
	cmd := exec.Command("curl", append([]string{"-s", "-m", "10", "-o", "-", "-w", "\n%{http_code}"}, args...)...)
	cmd.Dir = "/"
	if uid != 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	}
	out, _ := cmd.Output()
	s := strings.TrimRight(string(out), "\n")
	i := strings.LastIndex(s, "\n")
	if i < 0 {
		return s, ""
	}
	return s[i+1:], s[:i]
}

// TestHostControl: only the user who runs Airlock, with the token on the
// loopback port, can use the control API.
func TestHostControl(t *testing.T) {
	t.Parallel()
	// The attacks of another host user (uid 1000) need root to act as one;
	// the rest are the owner's own mistakes and the guest's, and run as anyone.
	otherUser := os.Getuid() == 0
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("needs curl")
	}
	s := startServe(t)
	status := s.url + "/v1/status"
	settings := func() string {
		code, body := curl(0, "-H", "Authorization: Bearer "+s.token, s.url+"/v1/settings")
		if code != "200" {
			t.Fatalf("settings with the token: %s %s", code, body)
		}
		return body
	}
	// Controls: the owner gets in both ways, so the refusals below mean something.
	if code, body := curl(0, "--unix-socket", s.sock, "http://airlock/v1/status"); code != "200" {
		t.Fatalf("the owner on the socket: %s %s", code, body)
	}
	if code, body := curl(0, "-H", "Authorization: Bearer "+s.token, status); code != "200" {
		t.Fatalf("the owner with the token: %s %s", code, body)
	}
	if code, body := curl(0, "-b", "airlock_token="+s.token, "-H", "Sec-Fetch-Site: same-origin", status); code != "200" {
		t.Fatalf("the owner's UI with the cookie: %s %s", code, body)
	}
	before := settings()

	refused := func(name string, want string, args ...string) {
		if strings.HasPrefix(name, "uid 1000") && !otherUser {
			return
		}
		attack(t, ctlFamily, name, func(a *Attack) {
			uid := uint32(0)
			if strings.HasPrefix(name, "uid 1000") {
				uid = 1000
			}
			code, body := curl(uid, args...)
			if strings.HasPrefix(code, "2") {
				a.breach("%s: HTTP %s %.200s", strings.Join(args, " "), code, body)
			}
			if code != want {
				a.Errorf("got HTTP %s, want %s: %.200s", code, want, body)
			}
		})
	}
	refused("uid 1000 on the unix socket", "000", "--unix-socket", s.sock, "http://airlock/v1/status")
	refused("uid 1000 on the loopback port without the token", "401", status)
	refused("uid 1000 on the loopback port with a guessed token", "401", "-H", "Authorization: Bearer "+strings.Repeat("0", len(s.token)), status)
	refused("no token", "401", status)
	refused("an empty bearer token", "401", "-H", "Authorization: Bearer ", status)
	refused("a wrong bearer token", "401", "-H", "Authorization: Bearer "+flip(s.token), status)
	refused("the token without its last character", "401", "-H", "Authorization: Bearer "+s.token[:len(s.token)-1], status)
	refused("the token with a character more", "401", "-H", "Authorization: Bearer "+s.token+"0", status)
	refused("a wrong ?token=", "401", status+"?token="+flip(s.token))
	refused("a wrong cookie", "401", "-b", "airlock_token="+flip(s.token), status)
	refused("a wrong bearer with the right ?token= ignored", "401", "-H", "Authorization: Bearer "+flip(s.token), status+"?token="+s.token)
	refused("the right token with a foreign Host (DNS rebinding)", "403", "-H", "Authorization: Bearer "+s.token, "-H", "Host: evil.test", status)
	refused("the right token with a foreign Host and port", "403", "-H", "Authorization: Bearer "+s.token, "-H", "Host: attacker.example:80", status)
	refused("change the egress rules without the token", "401", "-X", "POST", "-d", `{"action":"allow","pattern":"*.evil.test"}`, s.url+"/v1/egress/rules")
	refused("share / without the token", "401", "-X", "PUT", "-d", `{"dir":"/"}`, s.url+"/v1/workspace")
	refused("run a task without the token", "401", "-X", "POST", "-d", `{"shell":"id"}`, s.url+"/v1/tasks")
	refused("uid 1000 changes the egress rules without the token", "401", "-X", "POST", "-d", `{"action":"allow","pattern":"*.evil.test"}`, s.url+"/v1/egress/rules")
	// A page on another loopback port (a dev server showing a page the
	// agent wrote) is same-site for the UI's cookie: the browser sends it
	// with that page's form posts and no-cors fetches, which carry these
	// headers and cannot carry an Authorization header or a JSON type.
	cookie := "airlock_token=" + s.token
	otherPort := []string{"-b", cookie, "-H", "Sec-Fetch-Site: same-site", "-H", "Origin: http://127.0.0.1:8000"}
	post := func(path, ctype, body string, hdrs ...string) []string {
		return append(append([]string{"-X", "POST", "-H", "Content-Type: " + ctype, "--data-binary", body}, hdrs...), s.url+path)
	}
	refused("a page on another loopback port: a text/plain form post with the cookie adds an allow rule", "403",
		post("/v1/egress/rules", "text/plain", `{"action":"allow","pattern":"*.evil.test"}=`, otherPort...)...)
	refused("a page on another loopback port: a no-cors fetch with the cookie starts a root task", "403",
		post("/v1/tasks", "text/plain;charset=UTF-8", `{"shell":"id","root":true}`, otherPort...)...)
	refused("a page on another loopback port: a urlencoded form post with the cookie", "403",
		post("/v1/egress/rules", "application/x-www-form-urlencoded", `action=allow&pattern=*.evil.test`, otherPort...)...)
	refused("a page on another loopback port: the cookie on a POST without a body", "403",
		append([]string{"-X", "POST"}, append(otherPort, s.url+"/v1/disk/reset")...)...)
	refused("a cross-site page: the cookie with a JSON body", "403",
		post("/v1/tasks", "application/json", `{"shell":"id","root":true}`, "-b", cookie, "-H", "Sec-Fetch-Site: cross-site", "-H", "Origin: https://evil.example")...)
	refused("an older browser: the cookie with another port's Origin and no Sec-Fetch-Site", "403",
		post("/v1/egress/rules", "text/plain", `{"action":"allow","pattern":"*.evil.test"}`, "-b", cookie, "-H", "Origin: http://localhost:8000")...)
	refused("the cookie with a text/plain body even from the UI's origin", "403",
		post("/v1/egress/rules", "text/plain", `{"action":"allow","pattern":"*.evil.test"}`, "-b", cookie, "-H", "Sec-Fetch-Site: same-origin", "-H", "Origin: "+s.url)...)
	refused("the cookie with a Host of another loopback port", "403", "-b", cookie, "-H", "Host: 127.0.0.1:8000", status)
	attack(t, ctlFamily, "refused requests changed nothing", func(a *Attack) {
		if after := settings(); after != before {
			a.breach("settings changed by refused requests:\n%s\n%s", before, after)
		}
		if code, body := curl(0, "-H", "Authorization: Bearer "+s.token, s.url+"/v1/tasks"); code != "200" || strings.TrimSpace(body) != "[]" {
			a.breach("tasks after refused requests: HTTP %s %.300s", code, body)
		}
	})

	if otherUser {
		otherUserAttacks(t, s, settings)
	}

	// The guest aims at the host's control port through the gate, with the
	// token even (as if it had been leaked into the workspace).
	_, port, _ := strings.Cut(s.addr, ":")
	p := probe(t)
	for _, c := range []gateCase{
		{name: "from the guest: the control port on 127.0.0.1", cmd: p + " raw 'GET http://127.0.0.1:" + port + "/v1/status HTTP/1.1\\nHost: 127.0.0.1:" + port + "\\nAuthorization: Bearer " + s.token + "\\n\\n'", want: rs(egress.ReasonPrivateAddress)},
		{name: "from the guest: the control port by the name localhost", cmd: p + " raw 'GET http://localhost:" + port + "/v1/status HTTP/1.1\\nHost: localhost:" + port + "\\n\\n'", want: rs(egress.ReasonPrivateAddress)},
		{name: "from the guest: CONNECT to the control port", cmd: p + " raw 'CONNECT 127.0.0.1:" + port + " HTTP/1.1\\n\\n'", want: rs(egress.ReasonPrivateAddress)},
		{name: "from the guest: SOCKS to the control port", cmd: p + " socks5 connect ipv4 127.0.0.1 " + port, want: rs(egress.ReasonPrivateAddress)},
		{name: "from the guest: the control port directly", cmd: p + " dial 10.0.2.2:" + port},
	} {
		attack(t, ctlFamily, c.name, func(a *Attack) {
			if c.want == nil {
				if r := user(a, c.cmd); r.Exit.Code == 0 {
					a.breach("%s", r)
				}
				return
			}
			runGateCase(a, c)
		})
	}
}

// otherUserAttacks: another host user (uid 1000) at the service's CLI,
// socket and files.
func otherUserAttacks(t *testing.T, s *serve, settings func() string) {
	attack(t, ctlFamily, "uid 1000 runs the airlock CLI against the service", func(a *Attack) {
		cmd := exec.Command(airlockBin, "egress", "allow", "*.evil.test")
		cmd.Env, cmd.Dir = s.env, "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1000, Gid: 1000}}
		out, err := cmd.CombinedOutput()
		if err == nil || strings.Contains(settings(), "evil.test") {
			a.breach("uid 1000's CLI changed the rules: %s", out)
		}
	})

	attack(t, ctlFamily, "uid 1000 on a socket whose permissions were opened up (peer uid check)", func(a *Attack) {
		dir := filepath.Dir(s.sock)
		fi, _ := os.Stat(dir)
		si, _ := os.Stat(s.sock)
		os.Chmod(dir, 0o755)
		os.Chmod(s.sock, 0o666)
		defer os.Chmod(dir, fi.Mode().Perm())
		defer os.Chmod(s.sock, si.Mode().Perm())
		code, body := curl(1000, "--unix-socket", s.sock, "http://airlock/v1/status")
		if code == "200" {
			a.breach("uid 1000 used the socket once its mode allowed it to connect: %.200s", body)
		}
	})

	attack(t, ctlFamily, "uid 1000 reads the service's files (settings, tasks, socket folder)", func(a *Attack) {
		// Make the service write its settings first.
		if code, body := curl(0, "-X", "POST", "-H", "Authorization: Bearer "+s.token, "-d", `{"action":"allow","pattern":"written.test"}`, s.url+"/v1/egress/rules"); code != "200" {
			a.Fatalf("the owner's rule change: %s %s", code, body)
		}
		var leaked []string
		filepath.Walk(s.root, func(p string, fi os.FileInfo, err error) error {
			if err != nil || p == s.root || fi.IsDir() && (p == filepath.Join(s.root, "run") || filepath.Dir(p) == s.root) {
				return nil
			}
			cmd := exec.Command("sh", "-c", `if [ -d "$1" ]; then ls "$1"; else head -c 64 "$1"; fi`, "sh", p)
			cmd.Dir = "/"
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1000, Gid: 1000}}
			if out, err := cmd.CombinedOutput(); err == nil && len(out) > 0 {
				leaked = append(leaked, fmt.Sprintf("%s (%v)", strings.TrimPrefix(p, s.root), fi.Mode()))
			}
			return nil
		})
		if len(leaked) > 0 {
			a.breach("uid 1000 can read: %s", strings.Join(leaked, ", "))
		}
	})
}

// flip changes the token's first character.
func flip(tok string) string {
	b := []byte(tok)
	if b[0] == 'a' {
		b[0] = 'b'
	} else {
		b[0] = 'a'
	}
	return string(b)
}

// escName is a host name a guest asks the gate for over SOCKS, which
// carries any bytes as a name: an OSC 52 clipboard write, a cursor move
// that erases the line above, and a forged Airlock line.
const escName = "x\x1b]52;c;cm0gLXJmIH4=\x07\x1b[1A\x1b[2K\u009b2J.test\r\nairlock: egress: allowed evil.test"

// rawTerminalControl returns the first character in out a terminal would
// act on, other than the line ends the CLI writes.
func rawTerminalControl(out string) (rune, bool) {
	for _, r := range out {
		if r != '\n' && (r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0) {
			return r, true
		}
	}
	return 0, false
}

// TestGuestNamesOnTheTerminal: what the guest asked the gate for reaches
// the user's terminal only escaped, in `airlock run`'s refusal lines and
// in `airlock egress log`.
func TestGuestNamesOnTheTerminal(t *testing.T) {
	t.Parallel()
	ws := vmharness.NewWorkspace(t)
	if err := vmharness.BuildProbe(filepath.Join(ws, "probe")); err != nil {
		t.Fatal(err)
	}
	probeArgs := []string{"/workspace/probe", "socks5", "connect", "name", escName, "443"}
	// The escaped name, as the CLI shows it: proof the request reached the gate.
	const shown = `x\x1b]52;c;cm0gLXJmIH4=\a\x1b[1A\x1b[2K\u009b2J.test\r\nairlock: egress: allowed evil.test`

	attack(t, ctlFamily, "the guest asks for a host name with terminal escapes: airlock run's refusal line", func(a *Attack) {
		// Its own XDG folders: no service there, so run boots a VM of its own.
		root := a.TempDir()
		env := append(os.Environ(), "AIRLOCK_IMAGE_DIR="+imageRoot,
			"XDG_RUNTIME_DIR="+filepath.Join(root, "run"), "XDG_CONFIG_HOME="+filepath.Join(root, "config"),
			"XDG_STATE_HOME="+filepath.Join(root, "state"), "XDG_CACHE_HOME="+filepath.Join(root, "cache"))
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, airlockBin, append([]string{"run", "--workspace", ws, "--"}, probeArgs...)...)
		cmd.Env, cmd.Dir = env, "/"
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, _ := cmd.Output()
		if c, ok := rawTerminalControl(stderr.String()); ok {
			a.breach("raw %U on airlock run's stderr: %q", c, stderr.String())
		}
		if !strings.Contains(stderr.String(), "airlock: egress: refused ") || !strings.Contains(stderr.String(), shown) {
			a.Fatalf("no refusal line for the name (stdout %q): %q", out, stderr.String())
		}
	})

	attack(t, ctlFamily, "the guest asks for a host name with terminal escapes: airlock egress log", func(a *Attack) {
		s := startServe(t)
		cli := func(args ...string) (string, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, airlockBin, args...)
			cmd.Env, cmd.Dir = s.env, "/"
			out, err := cmd.CombinedOutput()
			return string(out), err
		}
		if out, err := cli("workspace", "set", ws); err != nil {
			a.Fatalf("workspace set: %v: %s", err, out)
		}
		// On the service's VM (booted for this task), through its gate.
		out, _ := cli(append([]string{"run", "--"}, probeArgs...)...)
		if c, ok := rawTerminalControl(out); ok {
			a.breach("raw %U in airlock run's output: %q", c, out)
		}
		for _, args := range [][]string{{"egress", "log"}, {"egress", "log", "--denied"}, {"egress", "log", "--json"}} {
			out, err := cli(args...)
			if err != nil {
				a.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
			}
			if c, ok := rawTerminalControl(out); ok {
				a.breach("raw %U in airlock %s: %q", c, strings.Join(args, " "), out)
			}
			if args[len(args)-1] != "--json" && !strings.Contains(out, shown) {
				a.Fatalf("airlock %s does not show the name: %q", strings.Join(args, " "), out)
			}
		}
	})
}
