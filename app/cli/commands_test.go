package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/app/service"
	"github.com/airlock-sandbox/airlock/app/session"
	"github.com/airlock-sandbox/airlock/app/settings"
)

// TestWriteStatus: `airlock status` names the image's kernel, and the
// machine type beside the accelerator when the backend reports one, and
// the accelerator alone otherwise.
func TestWriteStatus(t *testing.T) {
	st := service.Status{
		Session: session.Status{
			State: session.StateRunning, Workspace: "/home/u/reports", ReadOnly: true, Image: "minimal", Kernel: "6.1.192-airlock",
			CPUs: 2, MemoryMiB: 1024, Accelerator: "tcg", MachineType: "microvm", Generation: 3,
			BootTime: 1712 * time.Millisecond, Uptime: 42 * time.Second, ConsoleLog: "/run/console.log",
		},
		Settings:     settings.Settings{Allow: []string{"pypi.org"}},
		RunningTasks: 1,
		StateDir:     "/state",
	}
	var b strings.Builder
	writeStatus(&b, st)
	for _, want := range []string{
		"vm:        running\n",
		"workspace: /home/u/reports (read-only)\n",
		"image:     minimal, kernel 6.1.192-airlock\n",
		"machine:   2 CPUs, 1024 MiB, tcg on microvm, generation 3, booted in 1.712s, up 42s\n",
		"tasks:     1 running\n",
		"egress:    allow pypi.org; deny (none)\n",
		"console:   /run/console.log\n",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("missing %q in:\n%s", want, b.String())
		}
	}

	st.Session.MachineType, st.Session.Kernel = "", ""
	b.Reset()
	writeStatus(&b, st)
	if !strings.Contains(b.String(), "image:     minimal\n") {
		t.Errorf("without a kernel release:\n%s", b.String())
	}
	if !strings.Contains(b.String(), " MiB, tcg, generation") {
		t.Errorf("without a machine type:\n%s", b.String())
	}
}
