package service

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/app/changes"
	"github.com/airlock-sandbox/airlock/app/sandbox"
)

// layerOf is a guest layer (an OCI layer tar) holding files.
func layerOf(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, name := range slices.Sorted(maps.Keys(files)) {
		hdr := &tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(files[name])), ModTime: time.Now()}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(files[name]))
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestHeldWithoutAVM is a folder's held changes as the CLI's --workspace
// commands use them, with no VM: a host edit after the pull shows as a
// conflict; an apply leaves the layer disk while something is pending; the
// discard of the rest wipes it, and a disk a VM holds is left, with a
// warning, the discard done all the same.
func TestHeldWithoutAVM(t *testing.T) {
	ctx := context.Background()
	ws, state := t.TempDir(), t.TempDir()
	for name, body := range map[string]string{"a.txt": "host a\n", "b.txt": "host b\n", "c.txt": "host c\n"} {
		if err := os.WriteFile(filepath.Join(ws, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	h, err := OpenHeld(state, ws, changes.Review)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	var log bytes.Buffer
	h.Log = slog.New(slog.NewTextHandler(&log, nil))
	if err := sandbox.EnsureLayerDisk(h.LayerDisk(), 1<<20); err != nil {
		t.Fatal(err)
	}
	// The files above count as older than the layer's epoch.
	epoch := time.Now().Add(3 * time.Second)
	layer := layerOf(t, map[string]string{"a.txt": "guest a\n", "b.txt": "guest b\n", "c.txt": "guest c\n"})
	if _, err := h.Store.Ingest(ctx, bytes.NewReader(layer), ws, epoch, changes.DefaultLimits); err != nil {
		t.Fatal(err)
	}
	conflicts := func() []string {
		t.Helper()
		l, err := h.Changes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if l.Mode != changes.Review || len(l.Entries) == 0 {
			t.Fatalf("Changes = %+v", l)
		}
		var out []string
		for _, e := range l.Entries {
			if e.Conflict {
				out = append(out, e.Path)
			}
		}
		return out
	}
	if c := conflicts(); len(c) != 0 {
		t.Fatalf("conflicts before any edit: %q", c)
	}
	if err := os.WriteFile(filepath.Join(ws, "b.txt"), []byte("the user's b\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if c := conflicts(); !slices.Equal(c, []string{"b.txt"}) {
		t.Fatalf("conflicts after the user's edit: %q, want b.txt", c)
	}

	res, err := h.Apply(ctx, nil, false)
	if err != nil || !slices.Equal(res.Applied, []string{"a.txt", "c.txt"}) || !slices.Equal(res.Conflicts, []string{"b.txt"}) {
		t.Fatalf("Apply = %+v, %v", res, err)
	}
	if _, err := os.Stat(h.LayerDisk()); err != nil {
		t.Fatalf("the layer disk went while b.txt is pending: %v", err)
	}

	// A VM holds the disk: the discard is done, the wipe waits.
	l, err := sandbox.LockLayerDisk(h.LayerDisk())
	if err != nil {
		t.Fatal(err)
	}
	gone, err := h.Discard(ctx, []string{"b.txt"})
	l.Unlock()
	if err != nil || !slices.Equal(gone, []string{"b.txt"}) {
		t.Fatalf("Discard = %q, %v", gone, err)
	}
	if _, err := os.Stat(h.LayerDisk()); err != nil {
		t.Fatalf("the layer disk a VM holds: %v", err)
	}
	if !strings.Contains(log.String(), "did not settle") {
		t.Errorf("no warning of the layer left: %q", log.String())
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "b.txt")); string(b) != "the user's b\n" {
		t.Errorf("b.txt = %q, want the user's", b)
	}

	// With nothing pending and no VM, the next settle wipes the disk.
	if _, err := h.Discard(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(h.LayerDisk()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the layer disk is still there with nothing pending: %v", err)
	}
}
