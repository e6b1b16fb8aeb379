// Package vz is the macOS backend of vm.Machine: Apple's Virtualization
// framework through github.com/Code-Hex/vz/v3, with the VM inside the
// calling process.
//
// The package is split the way vfkit splits pkg/config from pkg/vf. The
// untagged files hold everything that is plain Go and is unit-tested on
// any OS: option and size checks (Limits), the kernel check (a raw arm64
// Image, never a compressed kernel), the kernel command line, and
// Describe, which maps a vm.Config to a Description of the machine. Only
// the _darwin.go files import vz; they turn a Description into vz calls
// and own the lifecycle. They are type-checked from Linux by
// build/typecheck (make check-darwin).
//
// The machine has no network device. The guest reaches the host only
// through one virtio-socket device (Dial and Listen) and sees one folder,
// shared with virtio-fs under the tag guest/api.WorkspaceTag.
package vz
