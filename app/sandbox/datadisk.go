package sandbox

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/airlock-sandbox/airlock/guest/api"
	"github.com/airlock-sandbox/airlock/images/vhd"
	"github.com/airlock-sandbox/airlock/internal/filelock"
)

// ErrDataDiskInUse is returned when a persistent disk is already attached
// to a running VM. Each VM mounts it read-write, so two at once would
// corrupt it, and deleting it under a VM would lose that VM's changes.
var ErrDataDiskInUse = errors.New("the persistent disk is in use by another running VM " +
	"(the service's, or an airlock run --keep-disk on the same workspace); stop that VM first")

// LockDataDisk takes the lock that a VM holds on the persistent disk at
// path for as long as it runs (released by Unlock, or by the operating
// system when the process dies).
func LockDataDisk(path string) (*filelock.Lock, error) {
	return lockDisk(path, "persistent disk", ErrDataDiskInUse)
}

// lockDisk takes the lock a VM holds on the disk at path (what, for
// errors) while it runs; one held already is inUse.
func lockDisk(path, what string, inUse error) (*filelock.Lock, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("sandbox: %s: %w", what, err)
	}
	l, err := filelock.TryLock(path + ".lock")
	if errors.Is(err, filelock.ErrLocked) {
		return nil, fmt.Errorf("sandbox: %s: %w", path, inUse)
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox: %s: %w", what, err)
	}
	return l, nil
}

// DefaultDataDiskSize is the size of a new persistent disk. The file is
// sparse: it takes only the space the guest writes.
const DefaultDataDiskSize = 16 << 30

// DataDiskPath is where the persistent disk of workspace ws lives under
// the state folder: one folder per canonical workspace path ("" for the
// sandbox without a workspace), named by a hash so any path fits.
func DataDiskPath(stateDir, ws string) string {
	sum := sha256.Sum256([]byte(ws))
	return filepath.Join(stateDir, "disks", hex.EncodeToString(sum[:8]), "data.vhd")
}

// EnsureDataDisk creates the persistent disk at path when it does not
// exist: a sparse file of size bytes that starts with api.BlankDiskMagic
// (the guest formats such a disk on first boot) and ends in a fixed-VHD
// footer, so every backend can attach it. An existing file is kept.
func EnsureDataDisk(path string, size int64) error {
	return ensureBlankDisk(path, size, api.BlankDiskMagic, "persistent disk")
}

// ensureBlankDisk creates the disk at path when it does not exist: a
// sparse file of size bytes that starts with magic and ends in a fixed-VHD
// footer. what names the disk in errors.
func ensureBlankDisk(path string, size int64, magic, what string) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("sandbox: %s: %w", what, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("sandbox: %s: %w", what, err)
	}
	tmp := path + ".new"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("sandbox: %s: %w", what, err)
	}
	err = markSparse(f)
	if err == nil {
		_, err = f.WriteString(magic)
	}
	if err == nil {
		err = f.Truncate(size)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		var id [16]byte
		copy(id[:], filepath.Base(filepath.Dir(path)))
		_, err = vhd.Append(tmp, id)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("sandbox: %s: %w", what, err)
	}
	return nil
}

// ResetDataDisk deletes the persistent disk at path, so the next boot
// starts from the image's root disk alone. A missing disk is no error; a
// disk a running VM uses is refused with ErrDataDiskInUse.
func ResetDataDisk(path string) error {
	return resetDisk(path, "persistent disk", ErrDataDiskInUse)
}

// resetDisk deletes the disk at path under its lock (see lockDisk).
func resetDisk(path, what string, inUse error) error {
	if _, err := os.Stat(filepath.Dir(path)); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	l, err := lockDisk(path, what, inUse)
	if err != nil {
		return err
	}
	defer l.Unlock()
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("sandbox: reset %s: %w", what, err)
	}
	return nil
}
