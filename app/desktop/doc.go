// Package desktop is the Airlock desktop app: a Wails v2 window over the
// host core, and a tray that keeps the VM running while the window is
// closed.
//
// The window shows the same web UI as `airlock serve --http`, and that UI
// talks only to the control API: the Wails AssetServer serves the embedded
// UI and routes /v1/ to api.Handler over the service.Core, so nothing
// listens on a port. On Linux and Windows that core runs in this process
// (or is a running `airlock serve`). On macOS it is always a client of the
// control socket: the VM and the core run in the helper, the airlock
// command in the app's bundle (Contents/Helpers/airlock serve), which the
// app starts when no service answers, restarts with back-off, stops on
// Quit when it started it, and reports in the window and the tray
// (helper.go). The app must not link Apple's Virtualization framework
// beside Wails (vm/platform/withvz). The few things a web page cannot do (a native
// folder dialog, showing the window, quitting) are Bindings, with no logic.
//
// Every call into the Wails runtime goes through the Runtime interface: the
// runtime ends the process (log.Fatal) when called outside a running Wails
// app, so tests use a fake. The tray is fyne.io/systray behind trayHost,
// started per OS (tray_darwin.go, tray_windows.go, tray_other.go).
package desktop
