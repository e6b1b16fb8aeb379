package desktop

import (
	_ "embed"
	"runtime"
	"time"

	"fyne.io/systray"
)

//go:embed icons/tray.ico
var trayIcon []byte

// startTray runs the notification-area icon on a thread of its own: its
// hidden window and message loop must share a thread, and Wails' loop owns
// the main one. stop removes the icon and ends that loop.
func startTray(t *tray) (stop func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		systray.Run(func() {
			systray.SetIcon(trayIcon)
			t.ready(systrayHost{})
		}, nil)
	}()
	return func() {
		systray.Quit()
		select {
		case <-done:
		case <-time.After(2 * time.Second):
		}
	}
}
