package desktop

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDarwinDeps keeps Apple's Virtualization framework out of the macOS
// desktop app: vz v3.7.1 and Wails v2.16.0 both define the Objective-C
// class AppDelegate, and a binary with both does not link. The app runs
// the airlock command as its helper for the VM (helper.go), so that
// command must still link vz (vm/platform/withvz). build/linkcheck checks
// the symbols; this checks the imports, for both Mac architectures.
func TestDarwinDeps(t *testing.T) {
	const (
		app = "github.com/airlock-sandbox/airlock"
		cli = "github.com/airlock-sandbox/airlock/app/cmd/airlock"
	)
	vz := []string{"github.com/Code-Hex/vz/v3", "github.com/airlock-sandbox/airlock/vm/vz", "github.com/airlock-sandbox/airlock/vm/platform/withvz"}
	for _, arch := range []string{"arm64", "amd64"} {
		deps := func(tags, pkg string) map[string]bool {
			t.Helper()
			args := []string{"list", "-deps"}
			if tags != "" {
				args = append(args, "-tags", tags)
			}
			cmd := exec.Command("go", append(args, pkg)...)
			cmd.Env = append(cmd.Environ(), "GOOS=darwin", "GOARCH="+arch, "CGO_ENABLED=1", "GOFLAGS=-mod=readonly")
			out, err := cmd.Output()
			if err != nil {
				t.Skipf("go list %s: %v", pkg, err)
			}
			m := map[string]bool{}
			for _, p := range strings.Fields(string(out)) {
				m[p] = true
			}
			return m
		}
		// The app as make desktop and wails build build it, and as a plain
		// go build or go test builds it.
		for _, tags := range []string{"desktop,production", ""} {
			d := deps(tags, app)
			if !d["github.com/wailsapp/wails/v2"] {
				t.Fatalf("darwin/%s: the app does not import Wails; is %s still the app?", arch, app)
			}
			for _, p := range vz {
				if d[p] {
					t.Errorf("darwin/%s (tags %q): the desktop app imports %s; it must not link vz beside Wails (run the VM in the helper)", arch, tags, p)
				}
			}
		}
		d := deps("", cli)
		for _, p := range vz {
			if !d[p] {
				t.Errorf("darwin/%s: the airlock command does not import %s: it could not run the app's VM", arch, p)
			}
		}
	}
}
