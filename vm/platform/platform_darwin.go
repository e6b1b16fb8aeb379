package platform

import (
	"fmt"

	"github.com/airlock-sandbox/airlock/vm"
	"github.com/airlock-sandbox/airlock/vm/platform/internal/inproc"
)

// New returns this platform's machine for cfg: Apple's Virtualization
// framework, in this process, when the program links it by importing
// vm/platform/withvz (the airlock command does). The desktop app does not
// (see withvz): it runs the airlock command as its helper, and New fails
// there.
func New(cfg vm.Config) (vm.Machine, error) {
	if inproc.Darwin == nil {
		return nil, fmt.Errorf("%w: this program does not include Apple's Virtualization framework; run the VM with the airlock command (`airlock serve`), which the desktop app starts from its bundle", vm.ErrNoHypervisor)
	}
	return inproc.Darwin(cfg)
}
