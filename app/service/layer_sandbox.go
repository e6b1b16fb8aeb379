package service

import (
	"errors"

	"github.com/airlock-sandbox/airlock/app/sandbox"
)

// layerDiskName is the layer disk's file in the store's folder.
const layerDiskName = "layer.img"

// holdOptions sets o to boot with the workspace held on the layer disk.
// PLACEHOLDER until app/sandbox's held-changes options land.
func holdOptions(o *sandbox.Options, disk string) {}

// wipeLayerDisk recreates the layer disk blank.
// PLACEHOLDER until app/sandbox's layer disk lands.
func wipeLayerDisk(path string) error { return errors.New("layer disk: not built yet") }
