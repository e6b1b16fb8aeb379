package platform

import (
	"github.com/airlock-sandbox/airlock/vm"
	"github.com/airlock-sandbox/airlock/vm/qemu"
)

// New returns this platform's machine for cfg.
func New(cfg vm.Config) (vm.Machine, error) {
	m, err := qemu.New(cfg, qemu.Options{})
	if err != nil {
		return nil, err
	}
	return m, nil
}
