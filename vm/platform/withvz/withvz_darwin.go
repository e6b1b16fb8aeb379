package withvz

import (
	"github.com/airlock-sandbox/airlock/vm"
	"github.com/airlock-sandbox/airlock/vm/platform/internal/inproc"
	"github.com/airlock-sandbox/airlock/vm/vz"
)

func init() {
	inproc.Darwin = func(cfg vm.Config) (vm.Machine, error) {
		m, err := vz.New(cfg, vz.Options{})
		if err != nil {
			return nil, err
		}
		return m, nil
	}
}
