//go:build !darwin && !windows

package desktop

import (
	_ "embed"
	"log"

	"fyne.io/systray"
)

//go:embed icons/tray.png
var trayIcon []byte

// startTray exports a StatusNotifierItem over the session D-Bus. It is
// pure Go and does not touch GTK, so it lives beside Wails' GTK loop
// without sharing it. Desktops without a StatusNotifier host (GNOME
// without the AppIndicator extension, a bare X server) show no tray: the
// window is then reached by launching Airlock again (single instance).
func startTray(t *tray) (stop func()) {
	start, end := systray.RunWithExternalLoop(func() {
		systray.SetIcon(trayIcon)
		t.ready(systrayHost{})
	}, nil)
	go start()
	return func() {
		// systray's end closes its D-Bus connection, which is nil when
		// there was no session bus.
		defer func() {
			if r := recover(); r != nil {
				log.Printf("desktop: the tray had no D-Bus connection to close (%v)", r)
			}
		}()
		end()
	}
}
