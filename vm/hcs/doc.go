// Package hcs is the Windows backend of vm.Machine: a Linux VM created by
// the Host Compute Service (computecore.dll) from a schema 2.1 document,
// reached over Hyper-V sockets, with the workspace shared by the host's
// Plan9 server.
//
// Creating a VM needs elevation, so the unprivileged app never calls HCS
// itself: airlock-vmservice (app/vmservice), a LocalSystem service, builds
// the document, creates, starts and terminates the VM on the app's behalf
// over a small versioned protocol on a named pipe (protocol.go, client.go).
// The app then binds its Hyper-V socket listeners to that VM's runtime id
// and dials the guest directly; the VM's security descriptors admit the
// requesting user and SYSTEM only.
//
// As in vm/qemu and vm/vz, everything that is plain Go is in untagged
// files and unit-tested on any OS: the schema structs and the document
// builder (document.go, golden JSON in testdata), the kernel command line,
// the protocol, the client, the Machine's lifecycle over injected sockets,
// and the diagnostics table (diagnose.go). The _windows.go files are thin:
// Hyper-V sockets and pipes through github.com/Microsoft/go-winio, and the
// computecore.dll bindings in hcs/computecore. They are cross-compiled and
// vetted on every CI run (make check-windows).
package hcs
