//go:build !linux

package cli

import "errors"

// signalService cannot name the service's process here.
func signalService(string) error {
	return errors.New("not supported on this system")
}
