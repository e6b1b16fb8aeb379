// Package computecore binds the Host Compute Service API (computecore.dll)
// through golang.org/x/sys/windows: create, start, modify, terminate and
// enumerate compute systems, observe their exit through the event
// callback, and grant a VM access to its boot files. It is Windows only
// (only this file builds elsewhere) and is used by airlock-vmservice, the
// one process that runs elevated; the documents it sends are built by
// package hcs.
//
// Every call that takes an HCS operation waits for it to finish: hcsshim
// found that abandoning a running operation (for a cancelled context) can
// crash the caller inside computecore.dll, so a context only bounds the
// wait between operations.
package computecore
