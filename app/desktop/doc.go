// Package desktop is the Airlock desktop app: a Wails v2 window over the
// host core, and a tray that keeps the VM running while the window is
// closed.
//
// The window shows the same web UI as `airlock serve --http`, and that UI
// talks only to the control API: the Wails AssetServer serves the embedded
// UI and routes /v1/ to api.Handler over the in-process service.Core, so
// nothing listens on a port. The few things a web page cannot do (a native
// folder dialog, showing the window, quitting) are Bindings, with no logic.
//
// Every call into the Wails runtime goes through the Runtime interface: the
// runtime ends the process (log.Fatal) when called outside a running Wails
// app, so tests use a fake. The tray is fyne.io/systray behind trayHost,
// started per OS (tray_darwin.go, tray_windows.go, tray_other.go).
package desktop
