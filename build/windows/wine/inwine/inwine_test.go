//go:build windows && wine

package inwine

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/Microsoft/go-winio"
	"golang.org/x/sys/windows"
	"golang.org/x/sys/windows/svc"
	"golang.org/x/sys/windows/svc/mgr"

	"github.com/airlock-sandbox/airlock/vm/hcs"
)

// env is a variable the Linux side sets; the test fails without it.
func env(t *testing.T, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		t.Fatalf("%s is not set: run through `make test-windows-wine`", name)
	}
	return v
}

// instDir is where the installer puts Airlock ($PROGRAMFILES64\<company>\<product>).
func instDir() string {
	pf := os.Getenv("ProgramW6432")
	if pf == "" {
		pf = os.Getenv("ProgramFiles")
	}
	return filepath.Join(pf, "Airlock", "Airlock")
}

func sum(t *testing.T, path string) [32]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

// run runs a program, bounded, and returns its exit code and output.
func run(t *testing.T, timeout time.Duration, stdin string, name string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	// A program may leave others running that inherited its output
	// handles (the installer's WebView2 bootstrapper does): its exit,
	// not their end, finishes the run.
	cmd.WaitDelay = 3 * time.Second
	start := time.Now()
	err := cmd.Run()
	if errors.Is(err, exec.ErrWaitDelay) {
		err = nil
	}
	if ctx.Err() != nil {
		t.Fatalf("%s %q: still running after %v\nstdout: %s\nstderr: %s", name, args, timeout, out.String(), errb.String())
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s %q: %v", name, args, err)
	}
	t.Logf("%s %s: exit %d in %v", filepath.Base(name), strings.Join(args, " "), code, time.Since(start).Round(time.Millisecond))
	return code, out.String(), errb.String()
}

// service is the VM service's registration and state, or ok false when
// it is not registered.
func service(t *testing.T) (cfg mgr.Config, st svc.Status, ok bool) {
	t.Helper()
	m, err := mgr.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer m.Disconnect()
	s, err := m.OpenService(hcs.ServiceName)
	if errors.Is(err, windows.ERROR_SERVICE_DOES_NOT_EXIST) {
		return cfg, st, false
	}
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if cfg, err = config(s.Handle); err != nil {
		t.Fatal(err)
	}
	if st, err = s.Query(); err != nil {
		t.Fatal(err)
	}
	return cfg, st, true
}

// config reads a service's QUERY_SERVICE_CONFIG alone: mgr's Config
// also asks for the delayed-start level, which Wine refuses.
func config(h windows.Handle) (mgr.Config, error) {
	// The strings the call returns point into the buffer: it must be on
	// the heap (a size known only at run time puts it there), not on a
	// stack that may move before they are read.
	n := uint32(len(hcs.ServiceName)) << 10
	b := make([]byte, n)
	p := (*windows.QUERY_SERVICE_CONFIG)(unsafe.Pointer(&b[0]))
	if err := windows.QueryServiceConfig(h, p, uint32(len(b)), &n); err != nil {
		return mgr.Config{}, err
	}
	return mgr.Config{
		ServiceType:      p.ServiceType,
		StartType:        p.StartType,
		BinaryPathName:   windows.UTF16PtrToString(p.BinaryPathName),
		ServiceStartName: windows.UTF16PtrToString(p.ServiceStartName),
		DisplayName:      windows.UTF16PtrToString(p.DisplayName),
	}, nil
}

// serviceReport says what the service manager and the service's log
// say, for a failure message.
func serviceReport(t *testing.T) string {
	cfg, st, ok := service(t)
	pd, _ := windows.KnownFolderPath(windows.FOLDERID_ProgramData, 0)
	log, err := os.ReadFile(filepath.Join(pd, "Airlock", "vmservice.log"))
	if err != nil {
		log = []byte(err.Error())
	}
	return fmt.Sprintf("registered %v as %q, state %d, exit %d/%d; log:\n%s", ok, cfg.BinaryPathName, st.State, st.Win32ExitCode, st.ServiceSpecificExitCode, log)
}

// waitRunning waits until the service runs and answers on its pipe.
func waitRunning(t *testing.T) svc.Status {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, st, ok := service(t)
		if ok && st.State == svc.Running {
			if c, err := dial(context.Background()); err == nil {
				c.Close()
				return st
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the service is not running and serving %s after 30 s (registered %v, state %d)", hcs.ServicePipe, ok, st.State)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// dial opens the service's pipe as the app does (hcs dialService): the
// access the pipe grants users, at impersonation level, and only if its
// owner is SYSTEM.
func dial(ctx context.Context) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, err := winio.DialPipeAccessImpLevel(ctx, hcs.ServicePipe, hcs.PipeClientAccess, winio.PipeImpLevelImpersonation)
	if err != nil {
		return nil, err
	}
	if err := hcs.CheckPipeServer(c, hcs.ServicePipe, hcs.SystemSID); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// checkFiles: what the installer put where it says, the desktop app
// being the desktop app (not the CLI, whose name is the same to Windows).
func checkFiles(t *testing.T, stage, app string) {
	t.Helper()
	dir := instDir()
	for _, f := range []struct{ installed, staged string }{
		{filepath.Join(dir, "Airlock.exe"), app},
		{filepath.Join(dir, "airlock-vmservice.exe"), filepath.Join(stage, "airlock-vmservice.exe")},
		{filepath.Join(dir, "bin", "airlock.exe"), filepath.Join(stage, "airlock.exe")},
		{filepath.Join(dir, "images", "amd64", "vmlinux"), filepath.Join(stage, "images", "amd64", "vmlinux")},
		{filepath.Join(dir, "images", "amd64", "initramfs.cpio"), filepath.Join(stage, "images", "amd64", "initramfs.cpio")},
	} {
		if sum(t, f.installed) != sum(t, f.staged) {
			t.Errorf("%s is not %s", f.installed, f.staged)
		}
	}
	for _, p := range []string{filepath.Join(dir, "uninstall.exe"), filepath.Join(os.Getenv("ProgramData"), `Microsoft\Windows\Start Menu\Programs\Airlock.lnk`)} {
		if _, err := os.Stat(p); err != nil {
			t.Error(err)
		}
	}
}

func checkRegistered(t *testing.T) svc.Status {
	t.Helper()
	st := waitRunning(t)
	cfg, _, _ := service(t)
	dir := instDir()
	want := windows.ComposeCommandLine([]string{filepath.Join(dir, "airlock-vmservice.exe"), "service", "-image-dir", filepath.Join(dir, "images", "amd64")})
	if cfg.BinaryPathName != want {
		t.Errorf("service command line %q, want %q", cfg.BinaryPathName, want)
	}
	if cfg.StartType != mgr.StartAutomatic || cfg.ServiceStartName != "LocalSystem" {
		t.Errorf("service start type %d as %q, want automatic as LocalSystem", cfg.StartType, cfg.ServiceStartName)
	}
	return st
}

// TestWine runs the steps in order on one prefix; a step that fails
// stops the rest.
func TestWine(t *testing.T) {
	installer := env(t, "AIRLOCK_WINE_INSTALLER")
	old := env(t, "AIRLOCK_WINE_OLD_INSTALLER")
	stage := env(t, "AIRLOCK_WINE_STAGE")
	oldStage := env(t, "AIRLOCK_WINE_OLD_STAGE")
	app := env(t, "AIRLOCK_WINE_APP")
	shots := env(t, "AIRLOCK_WINE_SHOTS")
	dir := instDir()
	cli := filepath.Join(dir, "bin", "airlock.exe")

	steps := []struct {
		name string
		f    func(t *testing.T)
	}{
		{"install an older version", func(t *testing.T) {
			if code, _, _ := run(t, 2*time.Minute, "", old, "/S"); code != 0 {
				t.Fatalf("the older installer exited %d; service: %s", code, serviceReport(t))
			}
			checkFiles(t, oldStage, app)
			checkRegistered(t)
		}},
		{"upgrade over it", func(t *testing.T) {
			before := waitRunning(t)
			if code, _, _ := run(t, 2*time.Minute, "", installer, "/S"); code != 0 {
				t.Fatalf("the installer exited %d over the older version; service: %s", code, serviceReport(t))
			}
			checkFiles(t, stage, app)
			after := checkRegistered(t)
			if after.ProcessId == before.ProcessId {
				t.Errorf("the service's process %d ran on through the upgrade", after.ProcessId)
			}
		}},
		{"the service's protocol", func(t *testing.T) { serviceProtocol(t, dir) }},
		{"airlock run against the service", func(t *testing.T) {
			ws := filepath.Join(os.Getenv("USERPROFILE"), "airlock-demo")
			if err := os.MkdirAll(ws, 0o755); err != nil {
				t.Fatal(err)
			}
			code, out, errs := run(t, time.Minute, "", cli, "run", "--workspace", ws, "--", "true")
			notCrashed(t, code, out+errs)
			if code == 0 || !strings.Contains(errs, "computecore.dll") || strings.Count(errs, `"Virtual Machine Platform" is not enabled`) != 1 {
				t.Errorf("airlock run: exit %d, want the Virtual Machine Platform diagnosis once:\n%s", code, errs)
			}
		}},
		{"airlock serve and its control pipe", func(t *testing.T) { serveAndCLI(t, cli) }},
		{"the desktop app without WebView2", func(t *testing.T) { desktop(t, filepath.Join(dir, "Airlock.exe"), shots) }},
		{"uninstall", func(t *testing.T) { uninstall(t, dir) }},
	}
	for _, s := range steps {
		if !t.Run(s.name, s.f) {
			t.FailNow()
		}
	}
}

// notCrashed: a Go program that panicked exits 2 with "goroutine" traces.
func notCrashed(t *testing.T, code int, out string) {
	t.Helper()
	if strings.Contains(out, "panic:") || strings.Contains(out, "goroutine ") || strings.Contains(out, "fatal error:") {
		t.Fatalf("crashed (exit %d):\n%s", code, out)
	}
}

// serviceProtocol speaks to the installed service on its pipe: a valid
// create gets the diagnosis for a machine without Hyper-V, an invalid
// one a refusal, a message of another protocol version or with unknown
// fields a refusal, and the pipe is the one SYSTEM serves.
func serviceProtocol(t *testing.T, dir string) {
	ctx := context.Background()
	c, err := dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	cl := &hcs.Client{Dial: dial}
	img := filepath.Join(dir, "images", "amd64")
	good := hcs.CreateRequest{Kernel: filepath.Join(img, "vmlinux"), Initrd: filepath.Join(img, "initramfs.cpio"), CPUs: 1, MemoryMiB: 512}
	_, _, err = cl.Create(ctx, good)
	if !errors.Is(err, hcs.ErrPlatformMissing) || !strings.Contains(err.Error(), "computecore.dll") {
		t.Errorf("a valid create = %v, want ErrPlatformMissing naming computecore.dll", err)
	}
	t.Logf("valid create: %v", err)
	// A kernel the caller put elsewhere: a real file, refused for where it is.
	own := filepath.Join(os.Getenv("USERPROFILE"), "vmlinux")
	if err := os.WriteFile(own, []byte("MZ"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, req := range map[string]hcs.CreateRequest{
		"kernel outside the image folder": {Kernel: own, Initrd: good.Initrd, CPUs: 1, MemoryMiB: 512},
		"a share of the Windows folder":   {Kernel: good.Kernel, Initrd: good.Initrd, CPUs: 1, MemoryMiB: 512, Share: &hcs.ShareRequest{Path: os.Getenv("SystemRoot")}},
		"10,000 CPUs":                     {Kernel: good.Kernel, Initrd: good.Initrd, CPUs: 10000, MemoryMiB: 512},
	} {
		_, _, err := cl.Create(ctx, req)
		if !errors.Is(err, hcs.ErrRefused) || errors.Is(err, hcs.ErrPlatformMissing) {
			t.Errorf("%s: create = %v, want a refusal", name, err)
		}
		t.Logf("%s: %v", name, err)
	}
	for name, raw := range map[string]string{
		"protocol version 99": `{"v":99,"op":"create"}`,
		"an unknown field":    `{"v":1,"op":"create","sudo":true}`,
		"not JSON":            `GET / HTTP/1.1`,
	} {
		resp := rawExchange(t, raw)
		if resp.Error == nil {
			t.Errorf("%s: answered %+v, want an error", name, resp)
			continue
		}
		t.Logf("%s: %s: %s", name, resp.Error.Code, resp.Error.Message)
	}
}

// rawExchange sends one line on a connection of its own and reads the
// answer; a connection closed without one is a refusal too (Error set).
func rawExchange(t *testing.T, line string) hcs.Response {
	t.Helper()
	c, err := dial(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		t.Fatal(err)
	}
	b, err := bufio.NewReader(c).ReadBytes('\n')
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("no answer to %q in 10 s", line)
		}
		return hcs.Response{Error: &hcs.WireError{Code: "closed", Message: err.Error()}}
	}
	var resp hcs.Response
	if err := json.Unmarshal(b, &resp); err != nil {
		t.Fatalf("answer %q: %v", b, err)
	}
	return resp
}

// serveAndCLI runs `airlock serve --no-boot` and the CLI against its
// control pipe.
func serveAndCLI(t *testing.T, cli string) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := exec.CommandContext(ctx, cli, "serve", "--no-boot")
	var serveOut bytes.Buffer
	srv.Stdout, srv.Stderr = &serveOut, &serveOut
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancel()
		srv.Wait()
		notCrashed(t, 0, serveOut.String())
		t.Logf("airlock serve said: %s", serveOut.String())
	}()
	u, err := windows.GetCurrentProcessToken().GetTokenUser()
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Session struct {
			State string `json:"state"`
			Image string `json:"image"`
		} `json:"session"`
		Settings struct {
			Allow   []string `json:"allow"`
			Secrets []struct {
				Name  string   `json:"name"`
				Hosts []string `json:"hosts"`
			} `json:"secrets"`
		} `json:"settings"`
	}
	status := func() {
		// The first answer can take seconds under Wine (the service's
		// first start of its stores); ask until it comes, 30 s at most.
		deadline := time.Now().Add(30 * time.Second)
		for {
			code, out, errs := run(t, 30*time.Second, "", cli, "status", "--json")
			if code == 0 {
				if err := json.Unmarshal([]byte(out), &st); err != nil {
					t.Fatalf("status --json: %v\n%s", err, out)
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("status --json: exit %d: %s", code, errs)
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	status()
	if st.Session.State != "stopped" {
		t.Errorf("a service started with --no-boot says its VM is %q", st.Session.State)
	}
	if !strings.Contains(serveOut.String(), `\\.\pipe\airlock-`+u.User.Sid.String()) {
		t.Errorf("serve does not say it serves the pipe named by the user's SID (%s): %s", u.User.Sid, serveOut.String())
	}
	if code, out, errs := run(t, 30*time.Second, "", cli, "tasks"); code != 0 || !strings.HasPrefix(out, "ID") {
		t.Errorf("tasks: exit %d: %s%s", code, out, errs)
	}
	if code, out, errs := run(t, 30*time.Second, "", cli, "egress", "allow", "example.com"); code != 0 {
		t.Errorf("egress allow: exit %d: %s%s", code, out, errs)
	}
	if code, out, errs := run(t, 30*time.Second, "s3cret-value", cli, "secret", "set", "TOKEN", "--host", "api.example.com"); code != 0 {
		t.Errorf("secret set: exit %d: %s%s", code, out, errs)
	}
	code, out, errs := run(t, 30*time.Second, "", cli, "secret", "list")
	if code != 0 || !strings.Contains(out, "TOKEN") || !strings.Contains(out, "api.example.com") {
		t.Errorf("secret list: exit %d: %s%s", code, out, errs)
	}
	if strings.Contains(out, "s3cret-value") {
		t.Errorf("secret list shows the value: %s", out)
	}
	status()
	if len(st.Settings.Allow) != 1 || st.Settings.Allow[0] != "example.com" || len(st.Settings.Secrets) != 1 || st.Settings.Secrets[0].Name != "TOKEN" {
		t.Errorf("status after the changes: allow %q, secrets %+v", st.Settings.Allow, st.Settings.Secrets)
	}
}

var (
	user32                       = windows.NewLazySystemDLL("user32.dll")
	procEnumChildWindows         = user32.NewProc("EnumChildWindows")
	procPostMessageW             = user32.NewProc("PostMessageW")
	procIsWindowVisible          = user32.NewProc("IsWindowVisible")
	procGetWindowTextW           = user32.NewProc("GetWindowTextW")
	wmCommand            uintptr = 0x0111
	idCancel             uintptr = 2
)

// windowsOf lists the visible top-level windows of process pid with the
// text of each and of its children.
func windowsOf(pid uint32) map[windows.HWND]string {
	found := map[windows.HWND]string{}
	text := func(h windows.HWND) string {
		buf := make([]uint16, 512)
		n, _, _ := procGetWindowTextW.Call(uintptr(h), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)))
		return windows.UTF16ToString(buf[:n])
	}
	top := syscall.NewCallback(func(h windows.HWND, _ uintptr) uintptr {
		var p uint32
		windows.GetWindowThreadProcessId(h, &p)
		if v, _, _ := procIsWindowVisible.Call(uintptr(h)); p == pid && v != 0 {
			all := []string{text(h)}
			child := syscall.NewCallback(func(c windows.HWND, _ uintptr) uintptr {
				all = append(all, text(c))
				return 1
			})
			procEnumChildWindows.Call(uintptr(h), child, 0)
			found[h] = strings.Join(all, " | ")
		}
		return 1
	})
	windows.EnumWindows(top, unsafe.Pointer(nil))
	return found
}

// desktop starts the installed app on a machine without WebView2: it
// says the runtime is needed (Wails' dialog) rather than crash, and
// exits when the dialog is cancelled. The Linux side takes a screenshot
// while the dialog is up.
func desktop(t *testing.T, exe, shots string) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, exe)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	pid := uint32(cmd.Process.Pid)
	var dialog windows.HWND
	deadline := time.Now().Add(60 * time.Second)
	for dialog == 0 {
		for h, txt := range windowsOf(pid) {
			if strings.Contains(txt, "WebView2") {
				dialog = h
				t.Logf("the app's window: %s", txt)
			}
		}
		select {
		case err := <-exited:
			t.Fatalf("the app exited (%v) without saying WebView2 is missing:\n%s", err, out.String())
		default:
		}
		if dialog == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("no window about WebView2 after 60 s; the app's windows: %v\n%s", windowsOf(pid), out.String())
			}
			time.Sleep(300 * time.Millisecond)
		}
	}
	// Ask the Linux side for a screenshot, and wait for it (bounded).
	done := filepath.Join(shots, "desktop.done")
	fmt.Printf("airlock-wine: screenshot desktop\n")
	for i := 0; i < 100; i++ {
		if _, err := os.Stat(done); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	procPostMessageW.Call(uintptr(dialog), wmCommand, idCancel, 0)
	select {
	case err := <-exited:
		notCrashed(t, cmd.ProcessState.ExitCode(), out.String())
		t.Logf("the app exited after the dialog was cancelled: %v %s", err, out.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("the app still runs 30 s after its WebView2 dialog was cancelled; windows: %v", windowsOf(pid))
	}
}

// uninstall runs the uninstaller silently: the service, the program
// folder, the shortcut and the user's WebView2 data go; the user's
// Airlock state and settings stay.
func uninstall(t *testing.T, dir string) {
	appData, local := os.Getenv("APPDATA"), os.Getenv("LOCALAPPDATA")
	webview := filepath.Join(appData, "Airlock.exe", "EBWebView")
	if err := os.MkdirAll(webview, 0o755); err != nil {
		t.Fatal(err)
	}
	keep := []string{filepath.Join(local, "Airlock"), filepath.Join(appData, "airlock", "settings.json")}
	for _, p := range keep {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("user data from the serve step is missing before the uninstall: %v", err)
		}
	}
	// The uninstaller copies itself to %TEMP% and runs from there, so it
	// can delete its folder; wait for that to finish.
	if code, _, _ := run(t, time.Minute, "", filepath.Join(dir, "uninstall.exe"), "/S"); code != 0 {
		t.Fatalf("uninstall.exe exited %d", code)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, _, registered := service(t)
		_, err := os.Stat(dir)
		if !registered && errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("60 s after the uninstall: service registered %v, %s: %v", registered, dir, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	gone := []string{
		filepath.Join(os.Getenv("ProgramData"), `Microsoft\Windows\Start Menu\Programs\Airlock.lnk`),
		filepath.Join(appData, "Airlock.exe"),
	}
	for _, p := range gone {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is left after the uninstall (%v)", p, err)
		}
	}
	k, err := registry(`Software\Microsoft\Windows\CurrentVersion\Uninstall\AirlockAirlock`)
	if err == nil {
		windows.RegCloseKey(k)
		t.Error("the uninstall registry key is left")
	}
	for _, p := range keep {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("the uninstall removed the user's data: %v", err)
		}
	}
	if c, err := dial(context.Background()); err == nil {
		c.Close()
		t.Error("something still serves the service's pipe after the uninstall")
	}
}

func registry(path string) (windows.Handle, error) {
	var k windows.Handle
	p, _ := windows.UTF16PtrFromString(path)
	err := windows.RegOpenKeyEx(windows.HKEY_LOCAL_MACHINE, p, 0, windows.KEY_READ|windows.KEY_WOW64_64KEY, &k)
	return k, err
}
