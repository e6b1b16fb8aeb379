//go:build unix

package tasks

import (
	"os"

	"golang.org/x/sys/unix"
)

// vecFile is a task log that writes a piece's records with one writev(2):
// headers and payload straight from the caller's buffer, no framing copy.
type vecFile struct{ *os.File }

func openAppend(path string) (logFile, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	return vecFile{f}, nil
}

// writeVec writes every byte of vec, as os.File.Write does of one buffer:
// a short write goes on from where it stopped.
func (f vecFile) writeVec(vec [][]byte) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var werr error
	if err := rc.Write(func(fd uintptr) bool {
		werr = writeAll(func(v [][]byte) (int, error) {
			for {
				n, err := unix.Writev(int(fd), v)
				if err != unix.EINTR {
					return n, err
				}
			}
		}, vec)
		return true
	}); err != nil {
		return err
	}
	if werr != nil {
		return &os.PathError{Op: "writev", Path: f.Name(), Err: werr}
	}
	return nil
}
