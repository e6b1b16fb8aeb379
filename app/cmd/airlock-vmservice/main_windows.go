package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"time"

	"golang.org/x/sys/windows"
	"golang.org/x/sys/windows/svc"
	"golang.org/x/sys/windows/svc/mgr"

	"github.com/airlock-sandbox/airlock/app/vmservice"
	"github.com/airlock-sandbox/airlock/vm/hcs"
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
	cmd := "service"
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
	case isService:
		log, closeLog := serviceLog()
		defer closeLog()
		return vmservice.RunService(vmservice.Config{ImageDir: *imageDir, Log: log})
	case cmd == "install":
		return install(*imageDir)
	case cmd == "remove":
		return remove()
	case cmd == "debug":
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
		return vmservice.Serve(ctx, vmservice.Config{ImageDir: *imageDir, Log: log})
	}
	return fmt.Errorf("unknown command %q (install, remove, debug)", cmd)
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

// serviceLog writes to %ProgramData%\Airlock\vmservice.log.
func serviceLog() (*slog.Logger, func()) {
	dir := filepath.Join(os.Getenv("ProgramData"), "Airlock")
	if err := os.MkdirAll(dir, 0o755); err == nil {
		f, err := os.OpenFile(filepath.Join(dir, "vmservice.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err == nil {
			return slog.New(slog.NewTextHandler(f, nil)), func() { f.Close() }
		}
	}
	return slog.New(slog.DiscardHandler), func() {}
}

func install(imageDir string) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	m, err := mgr.Connect()
	if err != nil {
		return fmt.Errorf("connect to the service manager (run as administrator): %w", err)
	}
	defer m.Disconnect()
	s, err := m.CreateService(hcs.ServiceName, exe, mgr.Config{
		DisplayName: "Airlock VM service",
		Description: "Creates the Linux VMs of Airlock sandboxes for signed-in users.",
		StartType:   mgr.StartAutomatic,
	}, "-image-dir", imageDir)
	if err != nil {
		return fmt.Errorf("create service: %w", err)
	}
	defer s.Close()
	// Restart after a crash: the app then sees "not running" only briefly.
	_ = s.SetRecoveryActions([]mgr.RecoveryAction{
		{Type: mgr.ServiceRestart, Delay: time.Second},
		{Type: mgr.ServiceRestart, Delay: 5 * time.Second},
		{Type: mgr.ServiceRestart, Delay: 30 * time.Second},
	}, 24*60*60)
	return s.Start()
}

func remove() error {
	m, err := mgr.Connect()
	if err != nil {
		return fmt.Errorf("connect to the service manager (run as administrator): %w", err)
	}
	defer m.Disconnect()
	s, err := m.OpenService(hcs.ServiceName)
	if err != nil {
		if errors.Is(err, windows.ERROR_SERVICE_DOES_NOT_EXIST) {
			return nil
		}
		return err
	}
	defer s.Close()
	if st, err := s.Control(svc.Stop); err == nil {
		for i := 0; i < 50 && st.State != svc.Stopped; i++ {
			time.Sleep(200 * time.Millisecond)
			if st, err = s.Query(); err != nil {
				break
			}
		}
	}
	return s.Delete()
}
