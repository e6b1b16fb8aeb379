package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/windows"
	"golang.org/x/sys/windows/svc"

	"github.com/airlock-sandbox/airlock/app/vmservice"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "airlock-vmservice:", err)
		os.Exit(1)
	}
}

func run() error {
	isService, err := svc.IsWindowsService()
	if err != nil {
		return err
	}
	cmd := ""
	args := os.Args[1:]
	if len(args) > 0 && args[0] != "" && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	imageDir := fs.String("image-dir", defaultImageDir(), "installed guest image folder for this architecture")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case isService, cmd == vmservice.ServiceCommand:
		log, closeLog := serviceLog()
		defer closeLog()
		return vmservice.RunService(vmservice.Config{ImageDir: *imageDir, Log: log})
	case cmd == "install", cmd == "stop", cmd == "remove":
		err := manage(cmd, *imageDir)
		if err != nil {
			// The installer runs these without a console: the log keeps why.
			log, closeLog := serviceLog()
			log.Error(cmd+" failed", "err", err)
			closeLog()
		}
		return err
	case cmd == "debug":
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
		return vmservice.Serve(ctx, vmservice.Config{ImageDir: *imageDir, Log: log})
	}
	return fmt.Errorf("unknown command %q: install, stop or remove (as administrator), debug (serve in this console), or service (what the service manager runs)", cmd)
}

// defaultImageDir is images\<arch> next to the executable, where the
// installer puts the guest image.
func defaultImageDir() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	return filepath.Join(filepath.Dir(exe), "images", runtime.GOARCH)
}

// serviceLog writes to %ProgramData%\Airlock\vmservice.log. The folder
// is asked of the shell, not of the environment, which the service
// manager may not fill (Wine's gives a service no ProgramData variable).
func serviceLog() (*slog.Logger, func()) {
	pd, err := windows.KnownFolderPath(windows.FOLDERID_ProgramData, 0)
	if err != nil {
		return slog.New(slog.DiscardHandler), func() {}
	}
	dir := filepath.Join(pd, "Airlock")
	if err := os.MkdirAll(dir, 0o755); err == nil {
		f, err := os.OpenFile(filepath.Join(dir, "vmservice.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err == nil {
			return slog.New(slog.NewTextHandler(f, nil)), func() { f.Close() }
		}
	}
	return slog.New(slog.DiscardHandler), func() {}
}

// manage runs install (register or update in place, then start), stop
// (and wait for the process to exit: the installer's upgrade) or remove.
func manage(cmd, imageDir string) error {
	m, err := vmservice.WindowsSCM()
	if err != nil {
		return err
	}
	defer m.Close()
	switch cmd {
	case "install":
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		return vmservice.Install(m, vmservice.ServiceConfig{Exe: exe, ImageDir: imageDir})
	case "stop":
		return vmservice.StopService(m)
	}
	return vmservice.Remove(m)
}
