package builder

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestLinkOrCopyAcrossFileSystems: where a hard link cannot be (another
// file system: /dev/shm), the root disk is copied whole, and dst appears
// at once, never half written.
func TestLinkOrCopyAcrossFileSystems(t *testing.T) {
	body := bytes.Repeat([]byte("root disk "), 100_000)
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.WriteFile(src, body, 0o644); err != nil {
		t.Fatal(err)
	}
	other, err := os.MkdirTemp("/dev/shm", "airlock-linkorcopy-")
	if err != nil {
		t.Skipf("no second file system to copy across: %v", err)
	}
	defer os.RemoveAll(other)
	var a, b syscall.Stat_t
	if syscall.Stat(other, &a) != nil || syscall.Stat(dir, &b) != nil || a.Dev == b.Dev {
		t.Skip("/dev/shm is on the same file system as the test's folder")
	}
	dst := filepath.Join(other, "dst")
	if err := linkOrCopy(src, dst); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(dst)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("copy across file systems: %d bytes, %v", len(got), err)
	}
	if _, err := os.Stat(dst + ".tmp"); !os.IsNotExist(err) {
		t.Fatalf("the temporary file stayed: %v", err)
	}
}
