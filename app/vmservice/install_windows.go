package vmservice

import (
	"errors"
	"fmt"
	"time"
	"unsafe"

	"golang.org/x/sys/windows"
	"golang.org/x/sys/windows/svc"
	"golang.org/x/sys/windows/svc/mgr"

	"github.com/airlock-sandbox/airlock/vm/hcs"
)

// WindowsSCM connects to the service control manager (administrators
// only) for hcs.ServiceName; Close disconnects.
func WindowsSCM() (*WinSCM, error) {
	m, err := mgr.Connect()
	if err != nil {
		return nil, fmt.Errorf("connect to the service manager (run as administrator): %w", err)
	}
	return &WinSCM{m: m}, nil
}

type WinSCM struct {
	m *mgr.Mgr
	// proc is the service's process, opened by Stop before it sends the
	// stop control, so WaitStopped can wait for its exit even when the
	// service reports stopped before WaitStopped first looks.
	proc windows.Handle
}

func (w *WinSCM) Close() error {
	if w.proc != 0 {
		windows.CloseHandle(w.proc)
		w.proc = 0
	}
	return w.m.Disconnect()
}

func (w *WinSCM) open() (*mgr.Service, error) { return w.m.OpenService(hcs.ServiceName) }

func (w *WinSCM) Query() (ServiceState, error) {
	s, err := w.open()
	if errors.Is(err, windows.ERROR_SERVICE_DOES_NOT_EXIST) {
		return ServiceMissing, nil
	}
	if err != nil {
		return 0, err
	}
	defer s.Close()
	st, err := s.Query()
	if err != nil {
		return 0, err
	}
	if st.State == svc.Stopped {
		return ServiceStopped, nil
	}
	return ServiceRunning, nil
}

func config() mgr.Config {
	return mgr.Config{
		DisplayName: "Airlock VM service",
		Description: "Creates the Linux VMs of Airlock sandboxes for signed-in users.",
		StartType:   mgr.StartAutomatic,
	}
}

func (w *WinSCM) Create(c ServiceConfig) error {
	s, err := w.m.CreateService(hcs.ServiceName, c.Exe, config(), c.Args()...)
	if errors.Is(err, windows.ERROR_SERVICE_MARKED_FOR_DELETE) {
		return fmt.Errorf("%w (%v)", ErrMarkedForDelete, err)
	}
	if err != nil {
		return err
	}
	defer s.Close()
	setRecovery(s)
	return nil
}

// Update changes what Create set: the command line, start type and
// display name with one ChangeServiceConfig (SERVICE_NO_CHANGE for the
// rest), then the description. mgr.Service.UpdateConfig would also
// rewrite the SID type and the delayed start, neither of which Airlock
// sets; Wine's service manager refuses the delayed-start level
// (ERROR_INVALID_LEVEL), which `make test-windows-wine` showed.
func (w *WinSCM) Update(c ServiceConfig) error {
	s, err := w.open()
	if err != nil {
		return err
	}
	defer s.Close()
	want := config()
	// The command line as CreateService composes it.
	bin, err := windows.UTF16PtrFromString(windows.ComposeCommandLine(append([]string{c.Exe}, c.Args()...)))
	if err != nil {
		return err
	}
	display, err := windows.UTF16PtrFromString(want.DisplayName)
	if err != nil {
		return err
	}
	err = windows.ChangeServiceConfig(s.Handle, windows.SERVICE_NO_CHANGE, want.StartType, windows.SERVICE_NO_CHANGE,
		bin, nil, nil, nil, nil, nil, display)
	if errors.Is(err, windows.ERROR_SERVICE_MARKED_FOR_DELETE) {
		return fmt.Errorf("%w (%v)", ErrMarkedForDelete, err)
	}
	if err != nil {
		return err
	}
	desc, err := windows.UTF16PtrFromString(want.Description)
	if err != nil {
		return err
	}
	d := windows.SERVICE_DESCRIPTION{Description: desc}
	if err := windows.ChangeServiceConfig2(s.Handle, windows.SERVICE_CONFIG_DESCRIPTION, (*byte)(unsafe.Pointer(&d))); err != nil {
		return err
	}
	setRecovery(s)
	return nil
}

// setRecovery restarts the service after a crash: the app then sees "not
// running" only briefly.
func setRecovery(s *mgr.Service) {
	_ = s.SetRecoveryActions([]mgr.RecoveryAction{
		{Type: mgr.ServiceRestart, Delay: time.Second},
		{Type: mgr.ServiceRestart, Delay: 5 * time.Second},
		{Type: mgr.ServiceRestart, Delay: 30 * time.Second},
	}, 24*60*60)
}

func (w *WinSCM) Start() error {
	s, err := w.open()
	if err != nil {
		return err
	}
	defer s.Close()
	err = s.Start()
	switch {
	case errors.Is(err, windows.ERROR_SERVICE_ALREADY_RUNNING):
		return nil
	case errors.Is(err, windows.ERROR_SERVICE_DATABASE_LOCKED):
		return fmt.Errorf("%w (%v)", ErrDatabaseLocked, err)
	}
	return err
}

func (w *WinSCM) Stop() error {
	s, err := w.open()
	if err != nil {
		return err
	}
	defer s.Close()
	if st, err := s.Query(); err == nil && st.ProcessId != 0 && w.proc == 0 {
		w.proc, _ = windows.OpenProcess(windows.SYNCHRONIZE, false, st.ProcessId)
	}
	// Already stopping (it cannot accept the control then), or stopped:
	// WaitStopped waits either way.
	if _, err := s.Control(svc.Stop); err != nil &&
		!errors.Is(err, windows.ERROR_SERVICE_NOT_ACTIVE) && !errors.Is(err, windows.ERROR_SERVICE_CANNOT_ACCEPT_CTRL) {
		return err
	}
	return nil
}

// WaitStopped polls until the service is stopped, then waits for its
// process to exit: SERVICE_STOPPED is reported before the process ends,
// and its executable stays locked until then.
func (w *WinSCM) WaitStopped(timeout time.Duration) error {
	s, err := w.open()
	if err != nil {
		return err
	}
	defer s.Close()
	deadline := time.Now().Add(timeout)
	for {
		st, err := s.Query()
		if err != nil {
			return err
		}
		if w.proc == 0 && st.ProcessId != 0 {
			w.proc, _ = windows.OpenProcess(windows.SYNCHRONIZE, false, st.ProcessId)
		}
		if st.State == svc.Stopped {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("still running after %v", timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if w.proc != 0 {
		left := time.Until(deadline)
		if left < time.Second {
			left = time.Second
		}
		if ev, _ := windows.WaitForSingleObject(w.proc, uint32(left.Milliseconds())); ev != windows.WAIT_OBJECT_0 {
			return fmt.Errorf("the service stopped, but its process did not exit within %v", timeout)
		}
	}
	return nil
}

func (w *WinSCM) Delete() error {
	s, err := w.open()
	if err != nil {
		return err
	}
	defer s.Close()
	return s.Delete()
}
