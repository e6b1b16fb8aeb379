//go:build !linux && !darwin && !windows

package platform

import (
	"fmt"
	"runtime"

	"github.com/airlock-sandbox/airlock/vm"
)

// New returns this platform's machine for cfg.
func New(cfg vm.Config) (vm.Machine, error) {
	return nil, fmt.Errorf("%w: the %s backend is not built yet", vm.ErrNoHypervisor, runtime.GOOS)
}
