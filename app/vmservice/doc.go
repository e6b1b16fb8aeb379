// Package vmservice is airlock-vmservice: the LocalSystem Windows service
// that creates, starts and terminates Airlock's Host Compute Service VMs
// for unprivileged apps, the way WSL's service does for wsl.exe.
//
// The app asks over the named pipe hcs.ServicePipe in the protocol of
// package vm/hcs (versioned JSON lines). The service trusts nothing in a
// request: Policy.Validate checks every field (canonical paths, boot files
// inside the installed image folder, a workspace folder the caller owns,
// bounded sizes) and the service builds the compute system document
// itself with hcs.Document. A VM lives as long as the connection that
// created it; at start the service terminates any Airlock VM left behind
// by a crash (Sweep).
//
// The protocol handling, validation and VM bookkeeping are plain Go,
// tested on any OS against a fake HCS and a fake file system. Only the
// service glue is Windows-specific (service_windows.go: svc.Run, the pipe
// and its ACL, the caller's token, the file system, and the adapter to
// vm/hcs/computecore).
package vmservice
