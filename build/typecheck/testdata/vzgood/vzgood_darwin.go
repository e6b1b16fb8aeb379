// Package vzgood calls vz the right way; the type-checker must accept it.
package vzgood

import (
	"github.com/Code-Hex/vz/v3"
)

// Boot builds and starts a machine with one virtio-socket device.
func Boot(kernel string) (*vz.VirtioSocketConnection, error) {
	bl, err := vz.NewLinuxBootLoader(kernel, vz.WithCommandLine("console=hvc0"))
	if err != nil {
		return nil, err
	}
	cfg, err := vz.NewVirtualMachineConfiguration(bl, 2, 1<<30)
	if err != nil {
		return nil, err
	}
	sock, err := vz.NewVirtioSocketDeviceConfiguration()
	if err != nil {
		return nil, err
	}
	cfg.SetSocketDevicesVirtualMachineConfiguration([]vz.SocketDeviceConfiguration{sock})
	m, err := vz.NewVirtualMachine(cfg)
	if err != nil {
		return nil, err
	}
	if err := m.Start(); err != nil {
		return nil, err
	}
	return m.SocketDevices()[0].Connect(1024)
}
