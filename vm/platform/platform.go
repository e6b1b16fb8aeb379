// Package platform picks the vm.Machine backend for the operating system
// Airlock runs on: QEMU on Linux, Apple's Virtualization framework (vz) on
// macOS, the Host Compute Service (hcs, through airlock-vmservice) on
// Windows. One tiny file per OS; everything else lives in the backends.
//
// On macOS the backend is linked only into programs that import
// vm/platform/withvz (the airlock command): the desktop app cannot link vz
// beside Wails (both define the Objective-C class AppDelegate), so it runs
// its VM in the airlock command, started from its bundle as a helper.
package platform
