// Package vzbad calls vz the wrong way in two places; the type-checker must refuse it.
package vzbad

import (
	"context"

	"github.com/Code-Hex/vz/v3"
)

// Boot builds and starts a machine with one virtio-socket device.
func Boot(ctx context.Context, kernel string) (*vz.VirtioSocketConnection, error) {
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
	cfg.SetSocketDevicesVirtualMachineConfiguration([]*vz.VirtioSocketDeviceConfiguration{sock})
	m, err := vz.NewVirtualMachine(cfg)
	if err != nil {
		return nil, err
	}
	if err := m.Start(); err != nil {
		return nil, err
	}
	return m.SocketDevices()[0].Connect(ctx, 1024)
}
