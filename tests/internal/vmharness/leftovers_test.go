package vmharness

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

func TestLeftoversSeesOpenFiles(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "held")
	os.WriteFile(f, nil, 0o644)
	cmd := exec.Command("sh", "-c", "exec sleep 30 3<"+f)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	for i := 0; i < 100 && Leftovers(dir) == ""; i++ {
		time.Sleep(50 * time.Millisecond)
	}
	if Leftovers(dir) == "" {
		t.Fatal("a process holding a file under dir open is not listed")
	}
	cmd.Process.Kill()
	cmd.Wait()
	if l := Leftovers(dir); l != "" {
		t.Fatalf("listed after it ended: %s", l)
	}
}
