package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
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
// CLI's change commands open one without a VM. Its change calls (Changes,
// Diff, Content, Apply, Discard, Checkpoints, Undo) are the ones the
// service answers, which adds its lock and its VM (On) only.
type Held struct {
	Workspace string
	Mode      changes.Mode
	Store     *changes.Store
	// Log takes what a change call does not answer: the guest's layer
	// not settling after an apply or a discard, which the next boot
	// settles (the call itself succeeded). nil discards it.
	Log *slog.Logger

	dir      string
	stateDir string
	guest    Guest // the VM on the layer disk, as On gave it
}

// Guest is the VM on a workspace's layer disk as a change call finds it.
// The zero Guest is none: the disk is free.
type Guest struct {
	// Agent is its agent, nil when none can be reached.
	Agent *client.Client
	// Busy says a VM holds the disk though Agent is nil (it boots or
	// stops): nothing may wipe the disk then.
	Busy bool
}

// On returns h making its calls with the VM g: what leaves the pending
// set is forgotten by g's layer (Agent), or, with no VM at all, a layer
// with nothing pending left is wiped. A Held as OpenHeld returns it has
// no VM.
func (h *Held) On(g Guest) *Held {
	c := *h
	c.guest = g
	return &c
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

// Changes lists the pending changes with the mode and the store's space;
// each one's Conflict is re-read from the folder (changes.Store.List).
func (h *Held) Changes(context.Context) (ChangesList, error) {
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

// Diff writes a unified diff of the pending changes to paths (all when
// none) against the folder's files.
func (h *Held) Diff(_ context.Context, paths []string, w io.Writer) error {
	return h.Store.Diff(h.Workspace, paths, w)
}

// Content opens the new content of a pending file.
func (h *Held) Content(_ context.Context, path string) (io.ReadCloser, changes.Entry, error) {
	return h.Store.Content(path)
}

// Apply carries the pending changes to paths (all when none) into the
// folder as one checkpoint, force applying conflicts too; then the layer
// settles (settle).
func (h *Held) Apply(ctx context.Context, paths []string, force bool) (changes.ApplyResult, error) {
	return h.apply(ctx, paths, changes.ApplyOptions{Force: force})
}

// ApplyAuto applies what Auto mode may (no conflicts, nothing the host's
// tools run), then the layer settles.
func (h *Held) ApplyAuto(ctx context.Context) (changes.ApplyResult, error) {
	return h.apply(ctx, nil, changes.ApplyOptions{Auto: true})
}

func (h *Held) apply(ctx context.Context, paths []string, opt changes.ApplyOptions) (changes.ApplyResult, error) {
	res, err := h.Store.Apply(h.Workspace, paths, opt)
	if err != nil {
		return res, err
	}
	h.settle(ctx)
	return res, nil
}

// Discard drops the pending changes to paths (all when none), then the
// layer settles; it returns the paths discarded.
func (h *Held) Discard(ctx context.Context, paths []string) ([]string, error) {
	done, err := h.Store.Discard(paths)
	if err != nil {
		return done, err
	}
	h.settle(ctx)
	if done == nil {
		done = []string{}
	}
	return done, nil
}

// Checkpoints lists the checkpoints, newest first, with the store's space.
func (h *Held) Checkpoints(context.Context) (CheckpointList, error) {
	cps, usage, err := h.Store.Checkpoints()
	if cps == nil {
		cps = []changes.Checkpoint{}
	}
	return CheckpointList{Checkpoints: cps, Usage: usage}, err
}

// Undo restores the folder to what it was before checkpoint id ("" is the
// newest not undone). The pending set is as it was, so the layer has
// nothing to settle.
func (h *Held) Undo(_ context.Context, id string) (changes.Checkpoint, error) {
	return h.Store.Undo(h.Workspace, id)
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

// errNoAgent means a call that needs the guest's layer was made on a
// Held with no agent (On).
var errNoAgent = errors.New("changes: no guest agent to reach the layer through")

// AfterBoot has a freshly booted guest (On) forget what was applied or
// discarded since its layer disk was last attached.
func (h *Held) AfterBoot(ctx context.Context) error {
	return h.forget(ctx)
}

// forget removes the store's forget list from the guest's layer, then
// empties the list. An empty list is nothing to do: ForgetLayer without
// paths forgets everything.
func (h *Held) forget(ctx context.Context) error {
	paths, err := h.Store.Forgotten()
	if err != nil || len(paths) == 0 {
		return err
	}
	if h.guest.Agent == nil {
		return errNoAgent
	}
	fctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := h.guest.Agent.ForgetLayer(fctx, paths); err != nil {
		return fmt.Errorf("changes: have the guest's layer forget %d applied or discarded paths: %w", len(paths), err)
	}
	return h.Store.ClearForgotten()
}

// Pull replaces the pending changes with what the guest's layer (On)
// holds.
func (h *Held) Pull(ctx context.Context) (changes.Summary, error) {
	if h.guest.Agent == nil {
		return changes.Summary{}, errNoAgent
	}
	pctx, cancel := context.WithTimeout(ctx, pullTimeout)
	defer cancel()
	rc, err := h.guest.Agent.ExportLayer(pctx)
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

// settle follows a change to the pending set (an apply, a discard; an
// undo needs none): a running guest forgets what left it; with no VM, a
// layer with nothing pending left is wiped, so the next VM starts on a
// blank one; a VM out of reach (Busy) forgets at its next boot. A failure
// is logged: the change itself is done, and the forget list waits for
// the next boot.
func (h *Held) settle(ctx context.Context) {
	var err error
	switch {
	case h.guest.Agent != nil:
		err = h.forget(ctx)
	case !h.guest.Busy:
		var pending int
		if pending, err = h.Store.Pending(); err == nil && pending == 0 {
			err = h.WipeLayer()
		}
	}
	if err != nil && h.Log != nil {
		h.Log.Warn("changes: the guest's layer did not settle after the change; the next boot does it", "workspace", h.Workspace, "err", err)
	}
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
