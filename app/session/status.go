package session

import (
	"time"

	"github.com/airlock-sandbox/airlock/guest/client"
)

// State is a session's lifecycle state.
//
//	stopped ──Start──▶ starting ──ready──▶ running ──Stop──▶ stopping ──▶ stopped
//	                      │                  │
//	                 boot failed      VM exited / agent dead,
//	                      ▼           Restart, SetWorkspace
//	                  restarting ◀───────────┘
//	          (stop the old VM, wait the back-off) ──▶ starting
//	                      │
//	        MaxFailures quick failures in a row ──▶ failed ──Start/Restart──▶ starting
//
// Stop and Close lead from every state to stopped.
type State string

// Session states.
const (
	// StateStopped: no VM, and none is wanted.
	StateStopped State = "stopped"
	// StateStarting: a VM is booting; Status.Phase tells how far it got.
	StateStarting State = "starting"
	// StateRunning: the VM is up and its agent answers.
	StateRunning State = "running"
	// StateStopping: the VM is being shut down on request.
	StateStopping State = "stopping"
	// StateRestarting: the previous VM is being shut down, or the session
	// waits out the back-off before the next boot.
	StateRestarting State = "restarting"
	// StateFailed: the session gave up; Status.LastError says why.
	StateFailed State = "failed"
)

// Boot and restart phases reported in Status.Phase.
const (
	PhasePreparing       = "preparing"
	PhaseCreatingMachine = "creating machine"
	PhaseStartingMachine = "starting machine"
	PhaseWaitingForGuest = "waiting for guest"
	PhaseConnectingAgent = "connecting to agent"
	PhaseStoppingMachine = "stopping machine"
	PhaseWaitingToRetry  = "waiting to retry"
)

// Status is a snapshot of a session, shaped for status displays and the
// control API. Durations are in nanoseconds in JSON.
type Status struct {
	State State `json:"state"`
	// Phase is the step of a boot or restart in progress.
	Phase string `json:"phase,omitempty"`
	// Elapsed is the time spent in this state (for starting: in this boot).
	Elapsed time.Duration `json:"elapsed_ns"`
	// Generation numbers the VMs the session booted, from 1; it is the
	// current VM's when running, and the last one's otherwise.
	Generation int    `json:"generation"`
	Workspace  string `json:"workspace"`
	ReadOnly   bool   `json:"read_only"`
	CPUs       int    `json:"cpus"`
	MemoryMiB  int    `json:"memory_mib"`
	// Image is the guest image the VM boots ("minimal", "standard"), and
	// KeepDisk whether its changes are kept on the workspace's disk.
	Image    string `json:"image,omitempty"`
	KeepDisk bool   `json:"keep_disk,omitempty"`
	// Kernel is the image's kernel release (sandbox.Image.KernelRelease).
	Kernel string `json:"kernel,omitempty"`
	// Accelerator, MachineType and PID describe the current (or last) VM;
	// MachineType is the hypervisor's machine where it has a choice (QEMU:
	// "q35", "microvm", "virt").
	Accelerator string `json:"accelerator,omitempty"`
	MachineType string `json:"machine_type,omitempty"`
	PID         int    `json:"pid,omitempty"`
	// BootTime is how long the last successful boot took.
	BootTime time.Duration `json:"boot_time_ns"`
	// Uptime is how long the running VM has been up.
	Uptime time.Duration `json:"uptime_ns"`
	// Restarts counts VMs the session brought back after losing them.
	Restarts int `json:"restarts"`
	// AgentRestarts counts the times the running VM's guest agent
	// restarted and the session reached the new one without a new VM.
	AgentRestarts int `json:"agent_restarts"`
	// Failures counts quick failures in a row (see RestartPolicy).
	Failures int `json:"failures"`
	// RetryIn is the wait left before the next boot, while restarting.
	RetryIn time.Duration `json:"retry_in_ns,omitempty"`
	// LastError is the latest boot failure or loss, kept after recovery.
	LastError string `json:"last_error,omitempty"`
	// ConsoleLog is the file the guest's serial console goes to.
	ConsoleLog string `json:"console_log,omitempty"`
}

// snapshot is the state behind Status, guarded by Session.mu. The
// supervisor writes it; everyone reads it.
type snapshot struct {
	state   State
	phase   string
	since   time.Time
	attempt int // the boot attempt the phase belongs to
	gen     int

	workspace string
	readOnly  bool
	cpus, mem int
	image     string
	kernel    string
	keepDisk  bool

	accel    string
	machine  string
	pid      int
	bootTime time.Duration
	upSince  time.Time

	restarts, failures int
	agentRestarts      int
	retryAt            time.Time
	lastErr            error
	consoleLog         string

	agent *client.Client // the running VM's, or nil
}

func (s *snapshot) status(now time.Time) Status {
	st := Status{
		State: s.state, Phase: s.phase, Elapsed: now.Sub(s.since), Generation: s.gen,
		Workspace: s.workspace, ReadOnly: s.readOnly, CPUs: s.cpus, MemoryMiB: s.mem,
		Image: s.image, KeepDisk: s.keepDisk, Kernel: s.kernel,
		Accelerator: s.accel, MachineType: s.machine, PID: s.pid, BootTime: s.bootTime,
		Restarts: s.restarts, AgentRestarts: s.agentRestarts, Failures: s.failures, ConsoleLog: s.consoleLog,
	}
	if s.state == StateRunning {
		st.Uptime = now.Sub(s.upSince)
	}
	if s.state == StateRestarting && !s.retryAt.IsZero() && s.retryAt.After(now) {
		st.RetryIn = s.retryAt.Sub(now)
	}
	if s.lastErr != nil {
		st.LastError = s.lastErr.Error()
	}
	return st
}
