// Package atomicfile replaces files so that a reader, or the next start
// after a crash, sees the old content or the new, never a mix.
package atomicfile

import (
	"os"
	"path/filepath"
)

// Durability says whether Write waits for the data to reach the disk.
type Durability bool

const (
	// Synced fsyncs the data before the rename: it survives a power loss
	// (settings, keys, manifests: small, rarely written).
	Synced Durability = true
	// Unsynced skips the fsync: the rename is still atomic against a crash
	// of the process, which is cheap enough for state written per task.
	Unsynced Durability = false
)

// Write replaces path with data, mode perm, by way of a temporary file in
// the same folder and a rename. The temporary file is removed on failure.
func Write(path string, data []byte, perm os.FileMode, d Durability) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	err = f.Chmod(perm)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil && d == Synced {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if d == Synced {
		// Best effort: makes the rename itself durable where folders can
		// be synced (not on Windows, where Sync of a folder fails).
		if dir, err := os.Open(filepath.Dir(path)); err == nil {
			_ = dir.Sync()
			dir.Close()
		}
	}
	return nil
}
