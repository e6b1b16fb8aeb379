//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunUnreadableFolder: a folder the user may not read is refused
// before a VM boots, in those words, not with QEMU's open error. Root
// reads every folder, so only an ordinary user (make test-user) sees it.
func TestRunUnreadableFolder(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads every folder; make test-user runs this as an ordinary user")
	}
	dir := filepath.Join(t.TempDir(), "locked")
	if err := os.Mkdir(dir, 0o000); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(dir, 0o755) })
	code, _, errOut := airlock(t, "", "run", "-w", dir, "--", "true")
	if code != 125 || !strings.Contains(errOut, "you cannot read this folder ("+dir+")") || strings.Contains(errOut, "qemu") {
		t.Fatalf("exit %d, stderr %q; want 125 and \"you cannot read this folder\"", code, errOut)
	}
}
