package desktop

import (
	_ "embed"

	"fyne.io/systray"
)

//go:embed icons/tray-template.png
var trayTemplateIcon []byte

// startTray puts the status item in the menu bar. It must run on the main
// thread, before wails.Run takes it for [NSApp run]: Wails calls OnStartup
// on another goroutine, and AppKit aborts when a status item is made off
// the main thread. The main goroutine is on the main thread here because
// Wails' darwin frontend and systray lock it in init. With the external
// loop systray does not take the application delegate; its menu updates
// are performed on the main thread by Wails' run loop.
//
// The returned stop does nothing: systray's end function sends [NSApp
// stop:], which would end Wails' loop, and the status item goes with the
// process anyway.
func startTray(t *tray) (stop func()) {
	start, _ := systray.RunWithExternalLoop(func() {
		systray.SetTemplateIcon(trayTemplateIcon, trayTemplateIcon)
		t.ready(systrayHost{})
	}, nil)
	start()
	return func() {}
}
