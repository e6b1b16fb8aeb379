// Package api is the contract between the host and the guest agent: vsock
// ports, the kernel command line keys the host uses to configure the guest,
// device names, and how the Ready message and the park records are framed.
// Every message itself is defined in agent/v1 (agent.proto, and the code
// generated from it); docs/protocol.md describes the whole protocol. This
// package imports nothing from the host side.
package api

// Ports on the guest/host transport (vsock, Hyper-V sockets, or the stream
// multiplexer on a virtio-serial port). The guest listens on PortAgent and
// PortExec and PortLayer; the host listens on the others.
const (
	// PortReady is dialled by the guest early in its boot; once the agent
	// serves it writes one Ready message and closes. The host waits for it
	// instead of polling, its first byte as long as the boot may take.
	PortReady uint32 = 1023
	// PortAgent serves the agent calls (Info, SetTime, TrustCA, Shutdown) in
	// guest/api/execwire frames, one after another on a stream the host
	// keeps.
	PortAgent uint32 = 1024
	// PortEgressHTTP carries connections accepted by the guest's HTTP proxy.
	PortEgressHTTP uint32 = 1025
	// PortEgressSOCKS carries connections accepted by the guest's SOCKS5 proxy.
	PortEgressSOCKS uint32 = 1026
	// PortExec takes one stream per task, in the frames of guest/api/execwire.
	PortExec uint32 = 1027
	// PortLayer takes one stream per layer call (export, forget) of a guest
	// booted with its changes held (BootConfig.Changes), in the frames of
	// guest/api/execwire: one agentv1.LayerRequest, then the tar's bytes
	// (export) and one agentv1.LayerResponse back.
	PortLayer uint32 = 1028
)

// Names of devices and mounts both sides agree on.
const (
	// SerialPortName is the virtio-serial port that carries the stream
	// multiplexer when the hypervisor has no vsock device
	// (/sys/class/virtio-ports/*/name).
	SerialPortName = "airlock.mux"
	// WorkspaceTag is the virtiofs / 9p mount tag of the shared folder.
	WorkspaceTag = "workspace"
	// WorkspaceDir is where the shared folder appears in the guest.
	WorkspaceDir = "/workspace"
	// DefaultUID and DefaultGID are the unprivileged task user's ids.
	DefaultUID = 1000
	DefaultGID = 1000
	// CAFile is where the guest keeps the host's installation CA (the
	// TrustCA call), and CABundle the system bundle every TLS library of
	// the image reads, to which TrustCA appends it.
	CAFile   = "/etc/ssl/certs/airlock-ca.pem"
	CABundle = "/etc/ssl/certs/ca-certificates.crt"
	// UserName and UserHome describe the unprivileged task user.
	UserName = "agent"
	UserHome = "/home/agent"
	// RootLabel is the ext4 label of the standard image's read-only root
	// disk; DataLabel that of a persistent writable layer.
	RootLabel = "airlock-root"
	DataLabel = "airlock-data"
	// BlankDiskMagic starts a persistent writable disk the host created and
	// the guest has not formatted yet (the guest looks for it at offset 0).
	BlankDiskMagic = "AIRLOCK-BLANK-DATA-DISK\n"
	// LayerLabel is the ext4 label of the disk that holds the changes
	// layer over a read-only share (BootConfig.Changes), and
	// BlankLayerMagic starts such a disk the host created blank (or
	// recreated to wipe it), which the guest formats.
	LayerLabel      = "airlock-layer"
	BlankLayerMagic = "AIRLOCK-BLANK-LAYER-DISK\n"
	// LayerDir is where the guest mounts the changes layer's disk (the
	// overlay's upper and work folders are in it), and LowerDir where it
	// mounts the read-only share beneath the overlay at WorkspaceDir.
	LayerDir = "/run/airlock/layer"
	LowerDir = "/run/airlock/lower"
	// LayerUpper and LayerWork are the overlay's upper and work folders
	// on the layer disk.
	LayerUpper = LayerDir + "/upper"
	LayerWork  = LayerDir + "/work"
)
