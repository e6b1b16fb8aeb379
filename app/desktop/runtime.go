package desktop

import (
	"context"
	"encoding/json"

	wruntime "github.com/wailsapp/wails/v2/pkg/runtime"
)

// Runtime is what the app asks of the window system. The Wails
// implementation is only used inside a running Wails app; tests use a fake.
type Runtime interface {
	// ShowWindow brings the window back (from the tray, a second launch).
	ShowWindow()
	// ShowScreen has the window's UI show one of its screens (its
	// window.airlockUI.show, frontend/src/main.ts).
	ShowScreen(screen string)
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

func (w wailsRuntime) ShowScreen(screen string) {
	// screen is one of the app's own names, never the guest's: quoted as
	// a JSON string all the same.
	b, _ := json.Marshal(screen)
	wruntime.WindowExecJS(w.ctx, "window.airlockUI && window.airlockUI.show("+string(b)+")")
}

func (w wailsRuntime) Quit() { wruntime.Quit(w.ctx) }

func (w wailsRuntime) ChooseFolder(title, dir string) (string, error) {
	return wruntime.OpenDirectoryDialog(w.ctx, wruntime.OpenDialogOptions{
		Title:                title,
		DefaultDirectory:     dir,
		CanCreateDirectories: true,
	})
}
