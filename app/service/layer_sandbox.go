package service

import (
	"github.com/airlock-sandbox/airlock/app/changes"
	"github.com/airlock-sandbox/airlock/app/sandbox"
)

// holdOptions sets o to boot with the workspace held on the layer disk at
// disk: the folder shared read-only, the disk as large as the store's
// bound, so a full layer gives the guest ENOSPC rather than more than the
// store would take.
func holdOptions(o *sandbox.Options, disk string) {
	o.Changes, o.LayerDisk, o.LayerDiskSize = true, disk, changes.DefaultLimit
}

// wipeLayerDisk removes the layer disk; the next boot makes it blank.
func wipeLayerDisk(path string) error { return sandbox.ResetLayerDisk(path) }
