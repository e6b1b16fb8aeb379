package vmservice

import (
	"errors"
	"fmt"
	"time"
)

// The service's own install, stop and remove, which the installer runs:
// the decisions here, the service control manager behind SCM
// (install_windows.go).

// ServiceState is what SCM.Query reports.
type ServiceState int

const (
	ServiceMissing ServiceState = iota
	ServiceStopped
	ServiceRunning // running, or starting, stopping, paused: not stopped
)

// ServiceConfig is how the service is registered.
type ServiceConfig struct {
	// Exe is the installed airlock-vmservice.exe; ImageDir its -image-dir.
	Exe, ImageDir string
}

// ServiceCommand is the command the service manager runs the service
// with. It is named on the command line rather than guessed from the
// parent process (svc.IsWindowsService looks for services.exe in session
// 0, which Wine's service manager is not).
const ServiceCommand = "service"

// Args are the service's arguments after its executable.
func (c ServiceConfig) Args() []string {
	return []string{ServiceCommand, "-image-dir", c.ImageDir}
}

// ErrMarkedForDelete is the service manager's ERROR_SERVICE_MARKED_FOR_DELETE
// (1072): an earlier removal waits for handles to the service to close.
var ErrMarkedForDelete = errors.New("the Airlock VM service is marked for deletion by an earlier uninstall; close the Services console (services.msc) and Task Manager, or restart Windows, then run the installer again")

// SCM is the part of the service control manager that Install,
// StopService and Remove use, for the one service hcs.ServiceName.
type SCM interface {
	Query() (ServiceState, error)
	Create(ServiceConfig) error
	// Update rewrites the existing service's command line, start type
	// and description.
	Update(ServiceConfig) error
	Start() error
	// Stop asks the service to stop and returns at once.
	Stop() error
	// WaitStopped returns once the service is stopped and its process
	// has exited (so its executable can be replaced), or after timeout.
	WaitStopped(timeout time.Duration) error
	Delete() error
}

// StopTimeout bounds the wait for the service to stop: it terminates its
// VMs first, each bounded by Server.OpTimeout's slices.
const StopTimeout = 60 * time.Second

// Install registers the service, or updates an existing registration in
// place, and starts it. An upgrade never deletes and recreates the
// service: DeleteService only marks a service for deletion while any
// handle to it is open, and a CreateService under the same name then
// fails with ERROR_SERVICE_MARKED_FOR_DELETE.
func Install(m SCM, cfg ServiceConfig) error {
	st, err := m.Query()
	if err != nil {
		return fmt.Errorf("query the service: %w", err)
	}
	if st == ServiceMissing {
		if err := m.Create(cfg); err != nil {
			return fmt.Errorf("create the service: %w", err)
		}
	} else {
		if st != ServiceStopped {
			if err := stop(m); err != nil {
				return err
			}
		}
		if err := m.Update(cfg); err != nil {
			return fmt.Errorf("update the service: %w", err)
		}
	}
	if err := start(m, StartLockedTimeout); err != nil {
		return fmt.Errorf("start the service: %w", err)
	}
	return nil
}

// ErrDatabaseLocked is the service manager's ERROR_SERVICE_DATABASE_LOCKED
// (1055): it is busy starting the automatic services (at boot; Wine's at
// the start of every session) and refuses to start another until done.
var ErrDatabaseLocked = errors.New("the service database is locked")

// StartLockedTimeout bounds how long Install retries a start the service
// manager refuses with ErrDatabaseLocked.
var StartLockedTimeout = 30 * time.Second

// start starts the service, again every half second while the service
// manager's database is locked, for up to wait.
func start(m SCM, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		err := m.Start()
		if !errors.Is(err, ErrDatabaseLocked) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// StopService stops the service, if installed and running, and waits
// until its process is gone: what an upgrade does before it replaces
// the executable.
func StopService(m SCM) error {
	st, err := m.Query()
	if err != nil {
		return fmt.Errorf("query the service: %w", err)
	}
	if st != ServiceRunning {
		return nil
	}
	return stop(m)
}

func stop(m SCM) error {
	if err := m.Stop(); err != nil {
		return fmt.Errorf("stop the service: %w", err)
	}
	if err := m.WaitStopped(StopTimeout); err != nil {
		return fmt.Errorf("stop the service: %w", err)
	}
	return nil
}

// Remove stops the service and deletes it (uninstall).
func Remove(m SCM) error {
	if err := StopService(m); err != nil {
		return err
	}
	st, err := m.Query()
	if err != nil {
		return fmt.Errorf("query the service: %w", err)
	}
	if st == ServiceMissing {
		return nil
	}
	if err := m.Delete(); err != nil {
		return fmt.Errorf("delete the service: %w", err)
	}
	return nil
}
