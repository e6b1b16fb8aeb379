// Package filelock takes exclusive, advisory locks on files, held until
// Unlock or until the process ends (the operating system drops the lock of
// a process that dies, so a crash never leaves a stale lock behind).
//
// Airlock uses it for what two VMs must never share at once: a workspace's
// persistent disk, which each VM mounts read-write.
package filelock

import (
	"errors"
	"fmt"
	"os"
)

// ErrLocked is returned by TryLock when another holder has the lock, in
// this process or another.
var ErrLocked = errors.New("locked by another holder")

// Lock is a held lock.
type Lock struct {
	f *os.File
}

// TryLock creates path if needed and locks it exclusively, without
// waiting: a lock someone else holds fails with ErrLocked.
func TryLock(path string) (*Lock, error) {
	f, err := tryLock(path)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return &Lock{f: f}, nil
}

// Unlock releases the lock. It is safe to call more than once.
func (l *Lock) Unlock() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close() // closing the file releases the lock
	l.f = nil
	return err
}
