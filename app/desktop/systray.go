package desktop

import "fyne.io/systray"

// systrayHost is the tray of fyne.io/systray; use it only from the
// onReady callback of the platform's start (tray_<os>.go).
type systrayHost struct{}

func (systrayHost) SetTooltip(s string) { systray.SetTooltip(s) }
func (systrayHost) AddSeparator()       { systray.AddSeparator() }
func (systrayHost) AddItem(title string) trayItem {
	return systrayItem{systray.AddMenuItem(title, "")}
}

type systrayItem struct{ *systray.MenuItem }

func (i systrayItem) Clicked() <-chan struct{} { return i.ClickedCh }
