// Package computecore binds the Host Compute Service API (computecore.dll)
// through golang.org/x/sys/windows: create, start, modify, terminate and
// enumerate compute systems, observe their exit through the event
// callback, and grant a VM access to its boot files. The bindings are
// Windows only; they are used by airlock-vmservice, the one process that
// runs elevated, and the documents they send are built by package hcs.
//
// Every call that takes an HCS operation waits for it with a timeout
// derived from its context (operation.go, which builds everywhere and is
// tested with fakes), and cancels the operation (HcsCancelOperation) when
// the context ends first, as hcsshim's runOperation does
// (internal/hcs/v2/operation.go). The wait returns only from
// HcsWaitForOperationResult, never by abandoning a call in flight: hcsshim
// found that abandoning one can crash the caller inside computecore.dll
// (internal/computecore/computecore.go, execute).
package computecore
