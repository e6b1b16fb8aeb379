package desktop

import (
	"context"

	wruntime "github.com/wailsapp/wails/v2/pkg/runtime"
)

// Runtime is what the app asks of the window system. The Wails
// implementation is only used inside a running Wails app; tests use a fake.
type Runtime interface {
	// ShowWindow brings the window back (from the tray, a second launch).
	ShowWindow()
	// Quit ends the Wails event loop; OnShutdown follows.
	Quit()
	// ChooseFolder shows the native folder dialog; "" means cancelled.
	ChooseFolder(title, dir string) (string, error)
}

// wailsRuntime calls the Wails runtime. It keeps the context Wails gave
// OnStartup because every runtime call needs exactly that context.
type wailsRuntime struct{ ctx context.Context }

func (w wailsRuntime) ShowWindow() {
	wruntime.WindowUnminimise(w.ctx)
	wruntime.WindowShow(w.ctx)
	wruntime.Show(w.ctx)
}

func (w wailsRuntime) Quit() { wruntime.Quit(w.ctx) }

func (w wailsRuntime) ChooseFolder(title, dir string) (string, error) {
	return wruntime.OpenDirectoryDialog(w.ctx, wruntime.OpenDialogOptions{
		Title:                title,
		DefaultDirectory:     dir,
		CanCreateDirectories: true,
	})
}
