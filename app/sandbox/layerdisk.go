package sandbox

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"path/filepath"

	"github.com/airlock-sandbox/airlock/guest/api"
	"github.com/airlock-sandbox/airlock/internal/filelock"
)

// The changes layer disk (Options.Changes): a sparse raw file per
// workspace, with a fixed-VHD footer so every backend attaches it, that
// the guest formats on first boot (api.BlankLayerMagic) and on which it
// keeps the overlay's upper layer. It persists across VMs until the host
// has applied or discarded everything in it, and then resets it
// (ResetLayerDisk): the next VM starts from a blank one.

// ErrLayerDiskInUse is returned when a workspace's layer disk is attached
// to a running VM: each VM mounts it read-write, so two at once would
// corrupt the changes it holds.
var ErrLayerDiskInUse = errors.New("the workspace's changes layer is in use by another running VM " +
	"(the service's, or another airlock run on the same workspace); stop that VM first")

// DefaultLayerDiskSize is the size of a new layer disk: the bound of the
// changes a guest can hold (a full layer gives its writers ENOSPC). The
// file is sparse: it takes only the space the guest writes.
const DefaultLayerDiskSize = 8 << 30

// LayerDiskPath is where workspace ws's layer disk lives under the state
// folder: beside the workspace's store of pending changes,
// <state>/changes/<hash>/layer.vhd, with DataDiskPath's hash of the
// canonical workspace path. The file is raw with a VHD footer, and named
// .vhd because Hyper-V takes a disk's format from its name (the Windows
// VM service attaches only .vhd files, app/vmservice).
func LayerDiskPath(stateDir, ws string) string {
	sum := sha256.Sum256([]byte(ws))
	return filepath.Join(stateDir, "changes", hex.EncodeToString(sum[:8]), "layer.vhd")
}

// EnsureLayerDisk creates the layer disk at path when it does not exist:
// a sparse file of size bytes that starts with api.BlankLayerMagic and
// ends in a fixed-VHD footer. An existing file (with the changes of an
// earlier VM) is kept.
func EnsureLayerDisk(path string, size int64) error {
	return ensureBlankDisk(path, size, api.BlankLayerMagic, "changes layer disk")
}

// LockLayerDisk takes the lock a VM holds on the layer disk at path while
// it runs (released by Unlock, or by the operating system when the
// process dies); ErrLayerDiskInUse when a VM holds it.
func LockLayerDisk(path string) (*filelock.Lock, error) {
	return lockDisk(path, "changes layer disk", ErrLayerDiskInUse)
}

// ResetLayerDisk deletes the layer disk at path, so the next VM starts
// with a blank layer: for when nothing in it is pending any more. A
// missing disk is no error; one a running VM uses is refused with
// ErrLayerDiskInUse.
func ResetLayerDisk(path string) error {
	return resetDisk(path, "changes layer disk", ErrLayerDiskInUse)
}
