//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/tests/internal/vmharness"
)

// consoleTailBytes is how much of a console a failed boot prints: enough
// for a kernel stall report (RCU stall, soft lockup, stack dumps) or init's
// last steps.
const consoleTailBytes = 12 << 10

// consoleDir holds the consoles of the VMs the suite boots itself
// (sandbox.Start removes the runtime folder of a failed boot, console
// included). It is removed after the run unless a boot failed.
var (
	consoleDir    string
	keepConsoles  bool
	consoleDirErr error
)

// consoleLog returns a console file for the VM called name, or "" (the
// sandbox's own runtime folder) when no folder could be made.
func consoleLog(name string) string {
	if consoleDir == "" && consoleDirErr == nil {
		consoleDir, consoleDirErr = os.MkdirTemp("", "airlock-e2e-console-")
	}
	if consoleDirErr != nil {
		return ""
	}
	return filepath.Join(consoleDir, name+".log")
}

// removeConsoles removes consoleDir unless a boot failed.
func removeConsoles() {
	if consoleDir != "" && !keepConsoles {
		os.RemoveAll(consoleDir)
	}
}

// reportBootFailure prints the tail of a VM's console to stderr after its
// boot failed, and keeps the whole file.
func reportBootFailure(what, path string) {
	if path == "" {
		return
	}
	keepConsoles = true
	tail, err := vmharness.ConsoleTail(path, consoleTailBytes)
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %s: no console: %v\n", what, err)
		return
	}
	fmt.Fprintf(os.Stderr, "e2e: %s: the guest console (kept in %s) ends with:\n%s\n", what, path, tail)
}

// logConsole logs the tail of the console an `airlock run` that failed
// (exit 125: an Airlock error, such as a guest that never became ready)
// was given with --console-log, before t's temporary folders go.
func logConsole(t *testing.T, args []string) {
	t.Helper()
	for i, a := range args {
		if a == "--" {
			return
		}
		path, ok := strings.CutPrefix(a, "--console-log=")
		if !ok && a == "--console-log" && i+1 < len(args) {
			path, ok = args[i+1], true
		}
		if ok {
			if tail, err := vmharness.ConsoleTail(path, consoleTailBytes); err == nil && tail != "" {
				t.Logf("airlock run failed; the guest console ends with:\n%s", tail)
			}
			return
		}
	}
}
