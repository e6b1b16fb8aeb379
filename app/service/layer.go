package service

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/app/changes"
	"github.com/airlock-sandbox/airlock/app/sandbox"
	"github.com/airlock-sandbox/airlock/guest/client"
	"github.com/airlock-sandbox/airlock/internal/atomicfile"
)

// ChangesDir is the folder of workspace ws's pending changes and
// checkpoints under the state folder (changes.Open): the folder its layer
// disk is in (sandbox.LayerDiskPath), named by a hash of the canonical
// path.
func ChangesDir(stateDir, ws string) string {
	return filepath.Dir(sandbox.LayerDiskPath(stateDir, ws))
}

// Holds reports whether a workspace in mode, shared read-only or not,
// holds the guest's writes in a layer: review and auto do, unless the
// share is read-only (then nothing can be written at all) or there is no
// folder.
func Holds(ws string, mode changes.Mode, readOnly bool) bool {
	return ws != "" && !readOnly && mode != changes.Direct
}

// epochFile records when the workspace's layer disk began (created blank
// or wiped): host changes after it may be ones the guest never saw.
const epochFile = "layer-epoch"

// Held is one workspace's held changes as a process uses them: its store
// (locked while open) and its guest layer disk. The service keeps one for
// its workspace; an ephemeral `airlock run` opens one for its run; the
// CLI's change commands open one without a VM.
type Held struct {
	Workspace string
	Mode      changes.Mode
	Store     *changes.Store
	dir       string
	stateDir  string
}

// OpenHeld opens the store of workspace ws (canonical) in the state
// folder. Another process holding it gives an error that names the cause
// and what to do.
func OpenHeld(stateDir, ws string, mode changes.Mode) (*Held, error) {
	dir := ChangesDir(stateDir, ws)
	st, err := changes.Open(dir, changes.Options{})
	if errors.Is(err, changes.ErrInUse) {
		return nil, fmt.Errorf("the changes of %s are held by another Airlock process (the service's, or an airlock run on the same folder): "+
			"stop it, or use the service's commands without --workspace: %w", ws, changes.ErrInUse)
	}
	if err != nil {
		return nil, err
	}
	return &Held{Workspace: ws, Mode: mode, Store: st, dir: dir, stateDir: stateDir}, nil
}

// Close releases the store.
func (h *Held) Close() error { return h.Store.Close() }

// List is the pending changes with the mode and the store's space, as
// the service and the CLI's --workspace commands show them.
func (h *Held) List() (ChangesList, error) {
	entries, err := h.Store.List(h.Workspace)
	if err != nil {
		return ChangesList{}, err
	}
	_, usage, err := h.Store.Checkpoints()
	if err != nil {
		return ChangesList{}, err
	}
	if entries == nil {
		entries = []changes.Entry{}
	}
	return ChangesList{Mode: h.Mode, Entries: entries, Usage: usage}, nil
}

// Checkpoints is the checkpoints, newest first, with the store's space.
func (h *Held) Checkpoints() (CheckpointList, error) {
	cps, usage, err := h.Store.Checkpoints()
	if cps == nil {
		cps = []changes.Checkpoint{}
	}
	return CheckpointList{Checkpoints: cps, Usage: usage}, err
}

// LayerDisk is the path of the workspace's guest layer disk, beside its
// store.
func (h *Held) LayerDisk() string { return sandbox.LayerDiskPath(h.stateDir, h.Workspace) }

// Epoch is when the layer disk began; a layer never recorded begins now.
func (h *Held) Epoch() time.Time {
	b, err := os.ReadFile(filepath.Join(h.dir, epochFile))
	if err == nil {
		if t, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(string(b))); err == nil {
			return t
		}
	}
	now := time.Now()
	_ = h.setEpoch(now)
	return now
}

func (h *Held) setEpoch(t time.Time) error {
	return atomicfile.Write(filepath.Join(h.dir, epochFile), []byte(t.UTC().Format(time.RFC3339Nano)+"\n"), 0o600, atomicfile.Synced)
}

// BootOptions makes o boot with the workspace held: the folder shared
// read-only beneath the guest's overlay, whose upper layer is the layer
// disk (created blank when missing, and the epoch with it).
func (h *Held) BootOptions(o *sandbox.Options) error {
	if _, err := os.Stat(h.LayerDisk()); errors.Is(err, fs.ErrNotExist) {
		if err := h.setEpoch(time.Now()); err != nil {
			return fmt.Errorf("changes: layer epoch: %w", err)
		}
	} else {
		h.Epoch() // a disk whose epoch was never written begins now
	}
	// The disk is as large as the store's bound, so a full layer gives
	// the guest ENOSPC rather than more than the store would take.
	o.Changes, o.LayerDisk, o.LayerDiskSize = true, h.LayerDisk(), changes.DefaultLimit
	return nil
}

// Fresh begins the layer's epoch anew when the layer holds nothing the
// host has not applied, discarded or had it forget: then whatever the
// guest writes from now on starts from the folder as it is now, and an
// edit the user made before now is no conflict. Call it only while no
// task can write to the layer (before a boot, or with no task running).
func (h *Held) Fresh() error {
	pending, err := h.Store.Pending()
	if err != nil || pending > 0 {
		return err
	}
	forgotten, err := h.Store.Forgotten()
	if err != nil || len(forgotten) > 0 {
		return err
	}
	return h.setEpoch(time.Now())
}

// AfterBoot has a freshly booted guest forget what was applied or
// discarded since its layer disk was last attached.
func (h *Held) AfterBoot(ctx context.Context, agent *client.Client) error {
	return h.forget(ctx, agent)
}

// forget removes the store's forget list from the guest's layer, then
// empties the list. An empty list is nothing to do: ForgetLayer without
// paths forgets everything.
func (h *Held) forget(ctx context.Context, agent *client.Client) error {
	paths, err := h.Store.Forgotten()
	if err != nil || len(paths) == 0 {
		return err
	}
	fctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := agent.ForgetLayer(fctx, paths); err != nil {
		return fmt.Errorf("changes: have the guest's layer forget %d applied or discarded paths: %w", len(paths), err)
	}
	return h.Store.ClearForgotten()
}

// Pull replaces the pending changes with what the guest's layer holds.
func (h *Held) Pull(ctx context.Context, agent *client.Client) (changes.Summary, error) {
	pctx, cancel := context.WithTimeout(ctx, pullTimeout)
	defer cancel()
	rc, err := agent.ExportLayer(pctx)
	if err != nil {
		return changes.Summary{}, fmt.Errorf("changes: read the guest's layer: %w", err)
	}
	defer rc.Close()
	sum, err := h.Store.Ingest(pctx, rc, h.Workspace, h.Epoch(), changes.DefaultLimits)
	if err != nil {
		return sum, fmt.Errorf("changes: %w", err)
	}
	return sum, nil
}

// pullTimeout bounds one pull: a full 8 GiB layer at a slow 20 MiB/s.
const pullTimeout = 10 * time.Minute

// Settle follows a change to the pending set (an apply, a discard, an
// undo needs none): a running guest (agent) forgets what left it; with
// no guest, a layer with nothing pending left is wiped, so the next VM
// starts on a blank one.
func (h *Held) Settle(ctx context.Context, agent *client.Client) error {
	if agent != nil {
		return h.forget(ctx, agent)
	}
	pending, err := h.Store.Pending()
	if err != nil || pending > 0 {
		return err
	}
	return h.WipeLayer()
}

// WipeLayer recreates the layer disk blank; no VM may be using it. The
// guest's layer forgets everything with it.
func (h *Held) WipeLayer() error {
	if err := sandbox.ResetLayerDisk(h.LayerDisk()); err != nil {
		return err
	}
	if err := h.setEpoch(time.Now()); err != nil {
		return fmt.Errorf("changes: layer epoch: %w", err)
	}
	return h.Store.ClearForgotten()
}
