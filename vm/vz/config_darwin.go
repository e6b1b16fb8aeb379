package vz

import (
	"errors"
	"fmt"

	"github.com/Code-Hex/vz/v3"
)

// hostLimits are the framework's size limits on this Mac.
func hostLimits() Limits {
	return Limits{
		MinCPUs:   vz.VirtualMachineConfigurationMinimumAllowedCPUCount(),
		MaxCPUs:   vz.VirtualMachineConfigurationMaximumAllowedCPUCount(),
		MinMemory: vz.VirtualMachineConfigurationMinimumAllowedMemorySize(),
		MaxMemory: vz.VirtualMachineConfigurationMaximumAllowedMemorySize(),
	}
}

// configure translates d into a validated framework configuration, one
// Description field at a time; it decides nothing itself.
func configure(d Description) (*vz.VirtualMachineConfiguration, error) {
	if len(d.Network) != 0 {
		return nil, errors.New("a network device was asked for: the guest must have none")
	}
	boot, err := vz.NewLinuxBootLoader(d.Boot.Kernel, vz.WithInitrd(d.Boot.Initrd), vz.WithCommandLine(d.Boot.Cmdline))
	if err != nil {
		return nil, fmt.Errorf("boot loader: %w", err)
	}
	conf, err := vz.NewVirtualMachineConfiguration(boot, d.CPUs, d.MemoryBytes)
	if err != nil {
		return nil, fmt.Errorf("configuration: %w", err)
	}
	platform, err := vz.NewGenericPlatformConfiguration()
	if err != nil {
		return nil, fmt.Errorf("platform: %w", err)
	}
	conf.SetPlatformVirtualMachineConfiguration(platform)

	if d.VirtioSocket {
		sock, err := vz.NewVirtioSocketDeviceConfiguration()
		if err != nil {
			return nil, fmt.Errorf("virtio-socket: %w", err)
		}
		conf.SetSocketDevicesVirtualMachineConfiguration([]vz.SocketDeviceConfiguration{sock})
	}
	if s := d.Share; s != nil {
		fs, err := vz.NewVirtioFileSystemDeviceConfiguration(s.Tag)
		if err != nil {
			return nil, fmt.Errorf("virtio-fs tag %q: %w", s.Tag, err)
		}
		dir, err := vz.NewSharedDirectory(s.HostPath, s.ReadOnly)
		if err != nil {
			return nil, fmt.Errorf("shared folder %s: %w", s.HostPath, err)
		}
		share, err := vz.NewSingleDirectoryShare(dir)
		if err != nil {
			return nil, fmt.Errorf("shared folder %s: %w", s.HostPath, err)
		}
		fs.SetDirectoryShare(share)
		conf.SetDirectorySharingDevicesVirtualMachineConfiguration([]vz.DirectorySharingDeviceConfiguration{fs})
	}
	if len(d.Disks) > 0 {
		var disks []vz.StorageDeviceConfiguration
		for _, disk := range d.Disks {
			caching, sync, err := diskModes(disk)
			if err != nil {
				return nil, fmt.Errorf("disk %s: %w", disk.Path, err)
			}
			// macOS 12 and later: older ones get vz.ErrUnsupportedOSVersion.
			att, err := vz.NewDiskImageStorageDeviceAttachmentWithCacheAndSync(disk.Path, disk.ReadOnly, caching, sync)
			if err != nil {
				return nil, fmt.Errorf("disk %s: %w", disk.Path, err)
			}
			blk, err := vz.NewVirtioBlockDeviceConfiguration(att)
			if err != nil {
				return nil, fmt.Errorf("disk %s: %w", disk.Path, err)
			}
			disks = append(disks, blk)
		}
		conf.SetStorageDevicesVirtualMachineConfiguration(disks)
	}
	if d.Entropy {
		rng, err := vz.NewVirtioEntropyDeviceConfiguration()
		if err != nil {
			return nil, fmt.Errorf("entropy device: %w", err)
		}
		conf.SetEntropyDevicesVirtualMachineConfiguration([]*vz.VirtioEntropyDeviceConfiguration{rng})
	}
	if d.Balloon {
		balloon, err := vz.NewVirtioTraditionalMemoryBalloonDeviceConfiguration()
		if err != nil {
			return nil, fmt.Errorf("memory balloon: %w", err)
		}
		conf.SetMemoryBalloonDevicesVirtualMachineConfiguration([]vz.MemoryBalloonDeviceConfiguration{balloon})
	}
	// The console only writes: nothing is sent to the guest over it.
	att, err := vz.NewFileSerialPortAttachment(d.Console.Path, d.Console.Append)
	if err != nil {
		return nil, fmt.Errorf("console log %s: %w", d.Console.Path, err)
	}
	console, err := vz.NewVirtioConsoleDeviceSerialPortConfiguration(att)
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	conf.SetSerialPortsVirtualMachineConfiguration([]*vz.VirtioConsoleDeviceSerialPortConfiguration{console})

	if n := len(conf.NetworkDevices()); n != 0 {
		return nil, fmt.Errorf("%d network devices configured: the guest must have none", n)
	}
	if ok, err := conf.Validate(); !ok || err != nil {
		if err == nil {
			err = errors.New("rejected without a reason")
		}
		// An unsigned binary, or one signed without the entitlement, fails
		// here and nowhere earlier; so does a Mac without virtualization.
		// explain tells them apart by the framework's reason.
		return nil, validationError{err}
	}
	return conf, nil
}

// validationError is the framework's refusal of a whole configuration
// (VZVirtualMachineConfiguration validateWithError:).
type validationError struct{ err error }

func (e validationError) Error() string { return e.err.Error() }
func (e validationError) Unwrap() error { return e.err }

// explainConfigure is the error New reports for configure's err.
func explainConfigure(err error, lim Limits) error {
	var v validationError
	if errors.As(err, &v) {
		return explain("configure", v.err, false, true, lim)
	}
	return explain("configure", err, errors.Is(err, vz.ErrUnsupportedOSVersion), false, lim)
}

// diskModes are d's modes in vz's terms (see DiskCached).
func diskModes(d DiskDevice) (vz.DiskImageCachingMode, vz.DiskImageSynchronizationMode, error) {
	var c vz.DiskImageCachingMode
	var s vz.DiskImageSynchronizationMode
	switch d.Caching {
	case DiskCached:
		c = vz.DiskImageCachingModeCached
	default:
		return 0, 0, fmt.Errorf("unknown caching mode %q", d.Caching)
	}
	switch d.Sync {
	case DiskFsync:
		s = vz.DiskImageSynchronizationModeFsync
	default:
		return 0, 0, fmt.Errorf("unknown synchronization mode %q", d.Sync)
	}
	return c, s, nil
}

// toEvent maps the framework's state to an event.
func toEvent(s vz.VirtualMachineState) event {
	switch s {
	case vz.VirtualMachineStateStarting:
		return evStarting
	case vz.VirtualMachineStateRunning:
		return evRunning
	case vz.VirtualMachineStateStopping:
		return evStopping
	case vz.VirtualMachineStateStopped:
		return evStopped
	case vz.VirtualMachineStateError:
		return evError
	}
	return evOther
}

// refused says whether err from VirtioSocketDevice.Connect means nothing
// listens on the guest port.
func refused(err error) bool {
	var ns *vz.NSError
	return errors.As(err, &ns) && connRefused(ns.Domain, ns.Code)
}
