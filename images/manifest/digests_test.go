package manifest

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestVerifyCached: an unchanged artifact's digest comes from the cache
// (shown by planting a wrong one there), a changed artifact is hashed
// again, and a file changed moments ago is not remembered.
func TestVerifyCached(t *testing.T) {
	defer func(d time.Duration) { settleTime = d }(settleTime)
	settleTime = 0
	dir, m := writeImage(t)
	c := &DigestCache{Path: filepath.Join(t.TempDir(), "sub", "digests.json")}
	if err := m.VerifyCached(dir, c); err != nil {
		t.Fatal(err)
	}
	entries := c.load()
	initrd, _ := filepath.Abs(filepath.Join(dir, "initramfs.cpio"))
	if len(entries) != 2 || entries[initrd].SHA256 != m.Artifacts[1].SHA256 {
		t.Fatalf("cache after a first verify: %+v", entries)
	}

	// The cache is what an unchanged file's digest comes from.
	e := entries[initrd]
	e.SHA256 = strings.Repeat("0", 64)
	entries[initrd] = e
	c.save(entries)
	if err := m.VerifyCached(dir, c); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("with a planted digest: %v, want ErrCorrupt (the cache was not consulted)", err)
	}
	// A day later it is hashed again, whatever the cache says.
	e.Checked = time.Now().Add(-recheckAfter - time.Minute)
	entries[initrd] = e
	c.save(entries)
	if err := m.VerifyCached(dir, c); err != nil {
		t.Fatalf("a day-old planted digest was trusted: %v", err)
	}
	if got := c.load()[initrd]; got.SHA256 != m.Artifacts[1].SHA256 || time.Since(got.Checked) > time.Minute {
		t.Fatalf("after rechecking: %+v", got)
	}

	// A file rewritten (same size) is hashed again: here, back to its
	// manifest's content, which verifies; then damaged, which does not.
	time.Sleep(20 * time.Millisecond) // past a coarse file-system clock's tick
	data, _ := os.ReadFile(filepath.Join(dir, "initramfs.cpio"))
	os.WriteFile(filepath.Join(dir, "initramfs.cpio"), data, 0o644)
	if err := m.VerifyCached(dir, c); err != nil {
		t.Fatalf("after rewriting the same content: %v", err)
	}
	time.Sleep(20 * time.Millisecond)
	data[0] ^= 1
	os.WriteFile(filepath.Join(dir, "initramfs.cpio"), data, 0o644)
	if err := m.VerifyCached(dir, c); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("after damaging the file: %v, want ErrCorrupt", err)
	}

	// Without a cache every start hashes, as Verify does.
	if err := m.VerifyCached(dir, nil); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("no cache: %v", err)
	}
}

// A file changed within settleTime is hashed but not remembered.
func TestDigestCacheSkipsFreshFiles(t *testing.T) {
	defer func(d time.Duration) { settleTime = d }(settleTime)
	settleTime = time.Hour
	dir, m := writeImage(t)
	c := &DigestCache{Path: filepath.Join(t.TempDir(), "digests.json")}
	if err := m.VerifyCached(dir, c); err != nil {
		t.Fatal(err)
	}
	if n := len(c.load()); n != 0 {
		t.Fatalf("%d fresh files remembered", n)
	}
}

// A damaged or oversized cache file is an empty cache; the cache keeps the
// most recently checked entries.
func TestDigestCacheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "digests.json")
	c := &DigestCache{Path: path}
	for _, bad := range []string{"not json", `{"/a":{"id":"","sha256":"x"}}`, `{"/a":` + strings.Repeat(" ", maxDigestFile) + `{}}`} {
		os.WriteFile(path, []byte(bad), 0o600)
		if n := len(c.load()); n != 0 {
			t.Errorf("%.20q: %d entries", bad, n)
		}
	}
	entries := map[string]digestEntry{}
	now := time.Now()
	for i := range maxDigestEntries + 10 {
		entries[fmt.Sprintf("/img/%d", i)] = digestEntry{ID: "1 2", SHA256: strings.Repeat("a", 64), Checked: now.Add(time.Duration(i) * time.Second)}
	}
	c.save(entries)
	b, _ := os.ReadFile(path)
	var got map[string]digestEntry
	if err := json.Unmarshal(b, &got); err != nil || len(got) != maxDigestEntries {
		t.Fatalf("saved %d entries (%v), want %d", len(got), err, maxDigestEntries)
	}
	if _, ok := got["/img/0"]; ok {
		t.Error("the least recently checked entry was kept")
	}
	if _, ok := got[fmt.Sprintf("/img/%d", maxDigestEntries+9)]; !ok {
		t.Error("the most recently checked entry was dropped")
	}
}
