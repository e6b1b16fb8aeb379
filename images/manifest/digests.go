package manifest

import (
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/atomicfile"
)

// DigestCache remembers the SHA-256 of image artifacts by file identity
// (size, modification time and, where the platform has them, change time,
// inode and device), so that an image that has not changed is not hashed
// again at every start, before the VM begins to boot (what hashing costs:
// docs/performance.md, Figures behind the code). A file changed in any way
// gets a new change time, and is hashed again.
//
// It guards against damaged and half-built images, as Verify does, not
// against someone who can write the image (they can write the program
// too). A file modified within the last few seconds is hashed and not
// remembered: on a file system whose clock is coarse, a second change in
// the same tick would keep its identity (git's "racy clean" problem). A
// remembered digest is trusted for recheckAfter, then the file is hashed
// again: damage that changes no metadata (a failing disk) is still found,
// within a day rather than at the next start.
type DigestCache struct {
	// Path is the cache file (JSON); empty disables the cache.
	Path string

	mu sync.Mutex
}

// digestEntry is one remembered digest.
type digestEntry struct {
	ID      string    `json:"id"`
	SHA256  string    `json:"sha256"`
	Checked time.Time `json:"checked"` // when the file was last hashed
}

// Bounds of the cache: entries kept (images and their artifacts, old
// builds included), and the file's size when read back.
const (
	maxDigestEntries = 64
	maxDigestFile    = 64 << 10
)

// recheckAfter is how long a remembered digest is trusted (see
// DigestCache).
const recheckAfter = 24 * time.Hour

// settleTime is how old a file's last change must be for its digest to be
// remembered (see DigestCache).
var settleTime = 3 * time.Second

// sum is the SHA-256 of the file at path (fi its Lstat or Stat), from the
// cache when the file is unchanged since it was remembered.
func (c *DigestCache) sum(path string, fi fs.FileInfo) (string, error) {
	if c == nil || c.Path == "" {
		return FileSHA256(path)
	}
	key, err := filepath.Abs(path)
	if err != nil {
		return FileSHA256(path)
	}
	id, changed := FileIdentity(fi)
	c.mu.Lock()
	defer c.mu.Unlock()
	entries := c.load()
	if e, ok := entries[key]; ok && e.ID == id && time.Since(e.Checked) < recheckAfter && !e.Checked.After(time.Now()) {
		return e.SHA256, nil
	}
	sum, err := FileSHA256(path)
	if err != nil {
		return "", err
	}
	if time.Since(changed) > settleTime {
		entries[key] = digestEntry{ID: id, SHA256: sum, Checked: time.Now()}
		c.save(entries)
	}
	return sum, nil
}

// load reads the cache file; a missing, unreadable or malformed one is an
// empty cache.
func (c *DigestCache) load() map[string]digestEntry {
	entries := map[string]digestEntry{}
	f, err := os.Open(c.Path)
	if err != nil {
		return entries
	}
	defer f.Close()
	// A file cut at the bound does not decode: an oversized cache is empty.
	var onDisk map[string]digestEntry
	if json.NewDecoder(io.LimitReader(f, maxDigestFile)).Decode(&onDisk) == nil {
		for k, e := range onDisk {
			if e.ID != "" && len(e.SHA256) == 64 {
				entries[k] = e
			}
		}
	}
	return entries
}

// save writes entries, the most recently checked maxDigestEntries of them.
// A cache that cannot be written costs only the next start's hashing.
func (c *DigestCache) save(entries map[string]digestEntry) {
	if len(entries) > maxDigestEntries {
		keys := make([]string, 0, len(entries))
		for k := range entries {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, func(a, b string) int { return entries[b].Checked.Compare(entries[a].Checked) })
		for _, k := range keys[maxDigestEntries:] {
			delete(entries, k)
		}
	}
	b, err := json.Marshal(entries)
	if err != nil {
		return
	}
	if err := os.MkdirAll(filepath.Dir(c.Path), 0o700); err != nil {
		return
	}
	_ = atomicfile.Write(c.Path, b, 0o600, atomicfile.Unsynced)
}
