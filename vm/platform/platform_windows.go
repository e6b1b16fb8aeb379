package platform

import (
	"github.com/airlock-sandbox/airlock/vm"
	"github.com/airlock-sandbox/airlock/vm/hcs"
)

// New returns this platform's machine for cfg: a Host Compute Service VM
// created by airlock-vmservice, reached over Hyper-V sockets.
func New(cfg vm.Config) (vm.Machine, error) {
	m, err := hcs.New(cfg, hcs.Options{})
	if err != nil {
		return nil, err
	}
	return m, nil
}
