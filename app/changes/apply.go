package changes

// ApplyOptions say how Apply treats what it would otherwise keep pending.
type ApplyOptions struct {
	// Force applies conflicting changes too (the host's version goes into
	// the checkpoint, so Undo brings it back).
	Force bool
	// Auto applies only what Auto mode may: no conflicts, no HostRuns
	// paths.
	Auto bool
}

// Apply carries the pending changes to paths (all when none) into the
// folder workspace, beneath it only (os.Root), journaled so that a crash
// at any point leaves each file old or new and the next Open finishes or
// rolls back; the previous version of every path it overwrites or deletes
// goes into a new checkpoint. Applied paths leave the pending changes and
// join the forget list.
func (s *Store) Apply(workspace string, paths []string, opt ApplyOptions) (ApplyResult, error) {
	return ApplyResult{}, errUnbuilt
}

// Checkpoints lists the checkpoints, newest first, and the store's space.
func (s *Store) Checkpoints() ([]Checkpoint, Usage, error) { return nil, Usage{}, errUnbuilt }

// Undo restores the folder workspace to what it was before checkpoint id
// ("" is the newest not undone): bytes, modes and modification times.
func (s *Store) Undo(workspace, id string) (Checkpoint, error) { return Checkpoint{}, errUnbuilt }

// recover finishes or rolls back an apply or undo that journal.json says
// was under way.
func (s *Store) recover() error { return nil }
