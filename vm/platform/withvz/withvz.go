// Package withvz links Apple's Virtualization framework (vm/vz) into a
// macOS program, for vm/platform to run VMs in that process: import it for
// its effect. The airlock command does; the desktop app does not, because
// vz v3.7.1 (virtualization_view.m) and Wails v2.16.0
// (internal/frontend/desktop/darwin/AppDelegate.m) both define the
// Objective-C class AppDelegate, and a binary with both does not link
// ("duplicate symbol '_OBJC_CLASS_$_AppDelegate'"). The app runs the
// airlock command from its bundle as its helper instead (app/desktop).
// On other systems the package is empty.
package withvz
