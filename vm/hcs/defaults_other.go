//go:build !windows

package hcs

import (
	"fmt"

	"github.com/airlock-sandbox/airlock/vm"
)

// platformDefaults fills what opt leaves nil; off Windows there is no
// service and no Hyper-V socket, so both must be given (tests).
func platformDefaults(opt *Options) error {
	if opt.Service == nil || opt.Sockets == nil {
		return fmt.Errorf("hcs: %w: Host Compute Service VMs run only on Windows", vm.ErrNoHypervisor)
	}
	return nil
}
