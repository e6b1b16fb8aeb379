package platform

import (
	"github.com/airlock-sandbox/airlock/vm"
	"github.com/airlock-sandbox/airlock/vm/vz"
)

// New returns this platform's machine for cfg: Apple's Virtualization
// framework, in this process.
func New(cfg vm.Config) (vm.Machine, error) {
	m, err := vz.New(cfg, vz.Options{})
	if err != nil {
		return nil, err
	}
	return m, nil
}
