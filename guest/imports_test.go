package guest_test

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

// TestGuestImportsNoHostCode enforces the design's one-way dependency: code
// in guest/ (which runs inside the VM, or is the contract the host imports)
// never imports the host's packages or Wails.
func TestGuestImportsNoHostCode(t *testing.T) {
	const mod = "github.com/airlock-sandbox/airlock/"
	out, err := exec.Command("go", "list", "-deps", "-json", "../guest/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	seen := 0
	for dec.More() {
		var p struct{ ImportPath string }
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(p.ImportPath, mod+"guest/") {
			seen++
		}
		for _, bad := range []string{mod + "app", mod + "vm", mod + "images", "github.com/wailsapp/"} {
			if p.ImportPath == bad || strings.HasPrefix(p.ImportPath, bad+"/") {
				t.Errorf("guest depends on %s", p.ImportPath)
			}
		}
	}
	if seen < 4 {
		t.Fatalf("go list found only %d guest packages; the check is not looking at the guest", seen)
	}
}
