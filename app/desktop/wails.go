package desktop

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/wailsapp/wails/v2"
	"github.com/wailsapp/wails/v2/pkg/options"
	"github.com/wailsapp/wails/v2/pkg/options/assetserver"
	"github.com/wailsapp/wails/v2/pkg/options/linux"
	"github.com/wailsapp/wails/v2/pkg/options/mac"
	"github.com/wailsapp/wails/v2/pkg/options/windows"
)

// UniqueID names the single-instance lock: a second launch shows the
// running app's window and exits.
const UniqueID = "io.github.airlock-sandbox.airlock"

// Run runs the desktop app until it quits: the window, the tray, and the
// service (its VM stopped on the way out). Closing the window hides it;
// the VM keeps running until Quit in the tray.
func Run(cfg Config) error {
	if generatingBindings {
		// `wails generate module` runs the program only to read Bind.
		return wails.Run(&options.App{Title: "Airlock", Bind: []any{&Bindings{}}})
	}
	a := New(cfg)
	defer a.Close()
	stopTray := startTray(a.tray)
	defer stopTray()

	return wails.Run(&options.App{
		Title:             "Airlock",
		Width:             1100,
		Height:            760,
		MinWidth:          720,
		MinHeight:         520,
		HideWindowOnClose: true,
		BackgroundColour:  &options.RGBA{R: 246, G: 248, B: 250, A: 255},
		AssetServer:       &assetserver.Options{Handler: a.Handler()},
		OnStartup: func(ctx context.Context) {
			a.Startup(wailsRuntime{ctx})
			takeQuitSignals(a)
		},
		OnShutdown: func(context.Context) { a.Shutdown() },
		SingleInstanceLock: &options.SingleInstanceLock{
			UniqueId:               UniqueID,
			OnSecondInstanceLaunch: func(options.SecondInstanceData) { a.ShowWindow() },
		},
		// Folders dropped on the window reach the UI as paths
		// (runtime.OnFileDrop); a browser only gets file contents.
		DragAndDrop: &options.DragAndDrop{EnableFileDrop: true},
		Bind:        []any{a.Bindings()},
		Linux:       &linux.Options{ProgramName: "airlock", WebviewGpuPolicy: linux.WebviewGpuPolicyOnDemand},
		Mac: &mac.Options{
			About: &mac.AboutInfo{Title: "Airlock", Message: "A disposable Linux computer that sees one folder."},
		},
		Windows: &windows.Options{},
	})
}

// takeQuitSignals makes SIGINT and SIGTERM quit through App.Quit for the
// rest of the process. Wails (v2.16) installs its own handler in Run, which
// on Linux calls gtk_main_quit from its goroutine; with ours beside it a
// signal would quit twice, and the second call can run into GTK's teardown
// after the first (SIGSEGV in gtk_main_quit). Called from
// OnStartup, once Wails' handler is in place, it resets the signals
// (undoing Wails' Notify) and takes them itself, so every quit — signal,
// tray or window — goes through App.Quit, which quits once.
func takeQuitSignals(a *App) {
	sig := make(chan os.Signal, 1)
	signal.Reset(os.Interrupt, syscall.SIGTERM)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		for range sig {
			a.Quit()
		}
	}()
}
