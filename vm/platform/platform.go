// Package platform picks the vm.Machine backend for the operating system
// Airlock runs on: QEMU on Linux, Apple's Virtualization framework (vz) on
// macOS, the Host Compute Service (hcs, through airlock-vmservice) on
// Windows. One tiny file per OS; everything else lives in the backends.
package platform
