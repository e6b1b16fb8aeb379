//go:build !unix

package tasks

import "os"

// openAppend opens a task log for appending; it writes a piece's records
// from the framing buffer (appendRecords).
func openAppend(path string) (logFile, error) {
	return os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
}
