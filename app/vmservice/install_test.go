package vmservice

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// fakeSCM is one service's registration as the service manager keeps it.
type fakeSCM struct {
	state  ServiceState
	cfg    ServiceConfig
	calls  []string
	failOn map[string]error
	// locked is how many starts fail with ErrDatabaseLocked first.
	locked int
}

func (f *fakeSCM) do(op string) error {
	f.calls = append(f.calls, op)
	return f.failOn[op]
}
func (f *fakeSCM) Query() (ServiceState, error) { return f.state, nil }
func (f *fakeSCM) Create(c ServiceConfig) error {
	if err := f.do("create"); err != nil {
		return err
	}
	f.state, f.cfg = ServiceStopped, c
	return nil
}
func (f *fakeSCM) Update(c ServiceConfig) error {
	if err := f.do("update"); err != nil {
		return err
	}
	f.cfg = c
	return nil
}
func (f *fakeSCM) Start() error {
	if f.locked > 0 {
		f.locked--
		f.calls = append(f.calls, "start")
		return ErrDatabaseLocked
	}
	if err := f.do("start"); err != nil {
		return err
	}
	f.state = ServiceRunning
	return nil
}
func (f *fakeSCM) Stop() error { return f.do("stop") }
func (f *fakeSCM) WaitStopped(time.Duration) error {
	if err := f.do("wait"); err != nil {
		return err
	}
	f.state = ServiceStopped
	return nil
}
func (f *fakeSCM) Delete() error {
	if err := f.do("delete"); err != nil {
		return err
	}
	f.state = ServiceMissing
	return nil
}

// TestInstallUpgradesInPlace: an installed service is stopped (waiting
// for its process) and updated, never deleted and created again, which
// fails with ERROR_SERVICE_MARKED_FOR_DELETE while anything holds a
// handle to it.
func TestInstallUpgradesInPlace(t *testing.T) {
	v2 := ServiceConfig{Exe: `C:\Program Files\Airlock\Airlock\airlock-vmservice.exe`, ImageDir: `C:\Program Files\Airlock\Airlock\images\amd64`}
	for _, tc := range []struct {
		name  string
		state ServiceState
		want  string
	}{
		{"fresh", ServiceMissing, "create start"},
		{"upgrade, running", ServiceRunning, "stop wait update start"},
		// The installer stopped it first (airlock-vmservice stop).
		{"upgrade, stopped", ServiceStopped, "update start"},
	} {
		f := &fakeSCM{state: tc.state}
		if err := Install(f, v2); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := strings.Join(f.calls, " "); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
		if f.cfg != v2 || f.state != ServiceRunning {
			t.Errorf("%s: %+v %v", tc.name, f.cfg, f.state)
		}
	}

	// A removal still pending says what to do.
	f := &fakeSCM{failOn: map[string]error{"create": ErrMarkedForDelete}}
	if err := Install(f, v2); !errors.Is(err, ErrMarkedForDelete) || !strings.Contains(err.Error(), "restart Windows") {
		t.Errorf("marked for delete: %v", err)
	}
	// A service that does not stop is not updated under its feet.
	f = &fakeSCM{state: ServiceRunning, failOn: map[string]error{"wait": errors.New("still running after 1m0s")}}
	if err := Install(f, v2); err == nil || strings.Contains(strings.Join(f.calls, " "), "update") {
		t.Errorf("stop timed out: %v, calls %v", err, f.calls)
	}
}

func TestStopAndRemove(t *testing.T) {
	for _, tc := range []struct {
		state    ServiceState
		stop, rm string
	}{
		{ServiceMissing, "", ""},
		{ServiceStopped, "", "delete"},
		{ServiceRunning, "stop wait", "stop wait delete"},
	} {
		f := &fakeSCM{state: tc.state}
		if err := StopService(f); err != nil || strings.Join(f.calls, " ") != tc.stop {
			t.Errorf("stop from %v: %v, calls %v", tc.state, err, f.calls)
		}
		f = &fakeSCM{state: tc.state}
		if err := Remove(f); err != nil || strings.Join(f.calls, " ") != tc.rm {
			t.Errorf("remove from %v: %v, calls %v", tc.state, err, f.calls)
		}
	}
}

// TestServiceArgs: the service manager runs the service with the command
// named, so the executable does not rely on guessing that its parent is
// the service manager (Wine's is not in session 0).
func TestServiceArgs(t *testing.T) {
	c := ServiceConfig{Exe: `C:\A\airlock-vmservice.exe`, ImageDir: `C:\A\images\amd64`}
	got := c.Args()
	if want := []string{"service", "-image-dir", `C:\A\images\amd64`}; !slices.Equal(got, want) {
		t.Errorf("Args() = %q, want %q", got, want)
	}
}

// TestInstallWaitsForLockedDatabase: a start refused because the service
// manager is busy starting automatic services is tried again (Wine's is,
// at the start of every session: the install failed with 1055 there),
// but not for ever.
func TestInstallWaitsForLockedDatabase(t *testing.T) {
	m := &fakeSCM{state: ServiceMissing, locked: 2}
	if err := Install(m, ServiceConfig{Exe: `C:\A\airlock-vmservice.exe`, ImageDir: `C:\A\images\amd64`}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"create", "start", "start", "start"}; !slices.Equal(m.calls, want) || m.state != ServiceRunning {
		t.Errorf("calls %q, state %v; want %q, running", m.calls, m.state, want)
	}
	saved := StartLockedTimeout
	StartLockedTimeout = 0
	defer func() { StartLockedTimeout = saved }()
	m = &fakeSCM{state: ServiceMissing, locked: 1000}
	if err := Install(m, ServiceConfig{}); !errors.Is(err, ErrDatabaseLocked) {
		t.Errorf("Install with a database locked for ever = %v", err)
	}
}
