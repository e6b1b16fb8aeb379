package sandbox

import (
	"github.com/airlock-sandbox/airlock/vm"
	"github.com/airlock-sandbox/airlock/vm/platform"
)

func defaultMachine(cfg vm.Config) (vm.Machine, error) { return platform.New(cfg) }
