// Package platform picks the vm.Machine backend for the operating system
// Airlock runs on: QEMU on Linux; vz (macOS) and HCS (Windows) later.
package platform
