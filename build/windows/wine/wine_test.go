//go:build wine

package wine

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The Windows programs under Wine (`make test-windows-wine`, after `make
// desktop-windows` has built build/bin/Airlock-amd64-installer.exe and
// staged its files in build/bin/windows_amd64): a fresh prefix, an older
// installer made here from the same files, then inwine's TestWine inside
// the prefix. Needs wine64 (Debian: wine64), makensis (nsis), an X
// display (the Makefile runs this under xvfb-run) and, for the
// screenshot, ImageMagick's import.

// program finds a Wine program on PATH or where Debian's wine64 puts it.
func program(t *testing.T, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	p := filepath.Join("/usr/lib/wine", name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s not found (apt-get install wine64)", name)
	}
	return p
}

// winPath is a Linux path as Wine's drive Z: shows it.
func winPath(p string) string { return `Z:` + strings.ReplaceAll(p, "/", `\`) }

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestWine(t *testing.T) {
	begin := time.Now()
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(root, "build", "bin")
	installer := filepath.Join(bin, "Airlock-amd64-installer.exe")
	app := filepath.Join(bin, "Airlock-amd64.exe")
	stage := filepath.Join(bin, "windows_amd64")
	for _, p := range []string{installer, app, filepath.Join(stage, "airlock.exe"), filepath.Join(root, "build", "windows", "installer", "wails_tools.nsh")} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%v: run `make desktop-windows` first", err)
		}
	}
	if os.Getenv("DISPLAY") == "" {
		t.Fatal("no DISPLAY: Wine's windows need one (the Makefile runs this under xvfb-run)")
	}
	wine, wineserver := program(t, "wine64"), program(t, "wineserver")
	tmp := t.TempDir()
	prefix := filepath.Join(tmp, "prefix")
	env := append(os.Environ(),
		"WINEPREFIX="+prefix, "WINEDEBUG=-all",
		// No Mono or Gecko installer prompts: nothing here uses them.
		"WINEDLLOVERRIDES=mscoree,mshtml=")
	cmd := func(name string, args ...string) *exec.Cmd {
		c := exec.Command(name, args...)
		c.Env = env
		return c
	}
	// Output goes to files, never pipes: the first Wine program of a
	// session starts the prefix's background programs (services.exe,
	// explorer.exe ...), which inherit its standard handles and outlive
	// it, and a pipe would not reach EOF until they exit.
	logs := filepath.Join(tmp, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		t.Fatal(err)
	}
	n := 0
	must := func(c *exec.Cmd) {
		t.Helper()
		n++
		out, err := os.Create(filepath.Join(logs, fmt.Sprintf("%02d.log", n)))
		if err != nil {
			t.Fatal(err)
		}
		defer out.Close()
		c.Stdout, c.Stderr = out, out
		c.WaitDelay = time.Second
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- c.Wait() }()
		select {
		case err = <-done:
		case <-time.After(2 * time.Minute):
			c.Process.Kill()
			err = fmt.Errorf("still running after 2 minutes")
		}
		if err != nil {
			b, _ := os.ReadFile(out.Name())
			t.Fatalf("%s: %v\n%s", c.Args, err, b)
		}
	}
	t.Cleanup(func() { _ = cmd(wineserver, "-k").Run() })

	// A fresh prefix, its server kept alive for the whole test (-p: it
	// stays while no program runs). The server forks into the background:
	// no pipes to it, or waiting for them would wait for it to exit.
	start := time.Now()
	if err := os.Mkdir(prefix, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := cmd(wineserver, "-p").Run(); err != nil {
		t.Fatalf("wineserver -p: %v", err)
	}
	must(cmd(wine, "wineboot", "--init"))
	t.Logf("fresh prefix in %v", time.Since(start).Round(time.Millisecond))
	// Go programs need bcryptprimitives.dll (shim.go); Airlock needs
	// Windows 10 build 19041 or later, and Wine 8.0's newest version,
	// win10, says 18362: the build number is the registry's.
	if err := os.WriteFile(filepath.Join(prefix, "drive_c", "windows", "system32", "bcryptprimitives.dll"), BcryptPrimitives(), 0o644); err != nil {
		t.Fatal(err)
	}
	must(cmd(wine, "winecfg", "-v", "win10"))
	const ver = `HKLM\Software\Microsoft\Windows NT\CurrentVersion`
	for _, v := range []string{"CurrentBuild", "CurrentBuildNumber"} {
		must(cmd(wine, "reg", "add", ver, "/v", v, "/d", "22631", "/f"))
	}
	// Windows waits 30 s for a starting service to reach its service
	// manager (ServicesPipeTimeout's default); Wine 8.0 waits 10 s, less
	// than a Go service takes under Wine on a loaded machine.
	must(cmd(wine, "reg", "add", `HKLM\System\CurrentControlSet\Control`, "/v", "ServicesPipeTimeout", "/t", "REG_DWORD", "/d", "30000", "/f"))
	// services.exe reads it when it starts: a new session.
	must(cmd(wineserver, "-k"))
	must(cmd(wineserver, "-w"))
	if err := cmd(wineserver, "-p").Run(); err != nil {
		t.Fatalf("wineserver -p: %v", err)
	}
	must(cmd(wine, "cmd", "/c", "ver"))

	// The older version: the same files but a service executable that
	// differs (bytes after its image, which Windows ignores), and an
	// older product version, so the upgrade must replace it.
	start = time.Now()
	oldStage := filepath.Join(tmp, "old")
	for _, f := range []string{"airlock.exe", "airlock-vmservice.exe", "images/amd64/vmlinux", "images/amd64/initramfs.cpio", "images/amd64/manifest.json"} {
		copyFile(t, filepath.Join(stage, f), filepath.Join(oldStage, f))
	}
	svcExe, err := os.OpenFile(filepath.Join(oldStage, "airlock-vmservice.exe"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	svcExe.WriteString("airlock: the older version")
	svcExe.Close()
	old := filepath.Join(tmp, "Airlock-amd64-installer-old.exe")
	// zlib: a few seconds where LZMA, the script's default, takes half a minute.
	mk := exec.Command("makensis", "-V2", "-XSetCompressor /FINAL zlib", "-DAIRLOCK_STAGE="+oldStage, "-DARG_WAILS_AMD64_BINARY="+app,
		"-DINFO_PRODUCTVERSION=0.0.1", "project.nsi", "-XOutFile "+old)
	mk.Dir = filepath.Join(root, "build", "windows", "installer")
	if out, err := mk.CombinedOutput(); err != nil {
		t.Fatalf("makensis (the older installer): %v\n%s", err, out)
	}
	t.Logf("older installer built in %v", time.Since(start).Round(time.Millisecond))

	// The tests inside the prefix.
	inwine := filepath.Join(tmp, "inwine.exe")
	build := exec.Command("go", "test", "-c", "-tags", "wine", "-o", inwine, "./build/windows/wine/inwine")
	build.Dir = root
	build.Env = append(os.Environ(), "GOOS=windows", "GOARCH=amd64", "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the in-Wine tests: %v\n%s", err, out)
	}
	shots := filepath.Join(tmp, "shots")
	if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	run := cmd(wine, inwine, "-test.v", "-test.timeout", "4m")
	run.Env = append(run.Env,
		"AIRLOCK_WINE_INSTALLER="+winPath(installer),
		"AIRLOCK_WINE_OLD_INSTALLER="+winPath(old),
		"AIRLOCK_WINE_STAGE="+winPath(stage),
		"AIRLOCK_WINE_OLD_STAGE="+winPath(oldStage),
		"AIRLOCK_WINE_APP="+winPath(app),
		"AIRLOCK_WINE_SHOTS="+winPath(shots))
	outPath := filepath.Join(logs, "inwine.log")
	out, err := os.Create(outPath)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	run.Stdout, run.Stderr = out, out
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- run.Wait() }()
	// Follow the output file: log each line, take the screenshots asked for.
	in, err := os.Open(outPath)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	passed, ended := false, false
	var pending []byte
	limit := time.After(5 * time.Minute)
	for !ended {
		select {
		case err := <-exited:
			ended = true
			if err != nil {
				t.Logf("in-Wine tests: %v", err)
			}
		case <-limit:
			run.Process.Kill()
			t.Error("the tests inside Wine still run after 5 minutes")
			ended = true
		case <-time.After(200 * time.Millisecond):
		}
		b, _ := io.ReadAll(in)
		pending = append(pending, b...)
		for {
			i := bytes.IndexByte(pending, '\n')
			if i < 0 {
				break
			}
			line := strings.TrimRight(string(pending[:i]), "\r")
			pending = pending[i+1:]
			t.Log(line)
			if line == "PASS" {
				passed = true
			}
			if name, ok := strings.CutPrefix(line, "airlock-wine: screenshot "); ok {
				shot(t, filepath.Join(bin, "wine-"+name+".png"))
				os.WriteFile(filepath.Join(shots, name+".done"), nil, 0o644)
			}
		}
	}
	if !passed {
		t.Errorf("the tests inside Wine failed")
	}
	t.Logf("Wine stage: %v", time.Since(begin).Round(time.Second))
}

// shot saves the X display's screen (ImageMagick's import), if it can.
func shot(t *testing.T, path string) {
	imp, err := exec.LookPath("import")
	if err != nil {
		t.Logf("no screenshot: %v (apt: imagemagick)", err)
		return
	}
	if out, err := exec.Command(imp, "-window", "root", path).CombinedOutput(); err != nil {
		t.Logf("no screenshot: %v %s", err, out)
		return
	}
	t.Logf("screenshot: %s", path)
}
