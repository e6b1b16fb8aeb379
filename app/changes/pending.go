package changes

import (
	"context"
	"errors"
	"io"
	"time"
)

// errUnbuilt marks a call whose body is being written.
var errUnbuilt = errors.New("changes: not built yet")

// Limits bound what Ingest reads from the guest.
type Limits struct {
	// Entries bounds the layer's entries (files, folders, links, whiteouts).
	Entries int
	// Bytes bounds the content it carries in all.
	Bytes int64
	// NameBytes bounds one path.
	NameBytes int
}

// DefaultLimits are Ingest's bounds when the caller gives none.
var DefaultLimits = Limits{Entries: 200_000, Bytes: DefaultLimit, NameBytes: 4096}

// Summary says what an Ingest found.
type Summary struct {
	Pending int       `json:"pending"`
	Bytes   int64     `json:"bytes"`
	Refused []Refusal `json:"refused,omitempty"`
}

// Ingest replaces the pending changes with what the guest's layer holds:
// r is the layer as a tar stream (OCI layer format: a whiteout is
// ".wh.NAME", an opaque folder holds ".wh..wh..opq"), hostile and bounded
// by lim. workspace is the host folder the layer lies over; epoch is when
// the layer began. A path already pending keeps the Base it had; a new one
// takes the host's path as it is now, and conflicts if the host changed it
// after epoch. An entry that cannot reach the host (a device, fifo,
// socket, an unsafe name or link) is refused and reported, not stored. A
// stream that breaks a bound or the format leaves the pending changes as
// they were.
func (s *Store) Ingest(ctx context.Context, r io.Reader, workspace string, epoch time.Time, lim Limits) (Summary, error) {
	return Summary{}, errUnbuilt
}

// List returns the pending changes, sorted by path.
func (s *Store) List() ([]Entry, error) { return nil, errUnbuilt }

// Diff writes a unified diff of the pending changes to paths (all when
// none) against the host's files in workspace: text files line by line,
// anything else in one summary line.
func (s *Store) Diff(workspace string, paths []string, w io.Writer) error { return errUnbuilt }

// Content opens the new content of a pending file (image previews).
func (s *Store) Content(path string) (io.ReadCloser, Entry, error) {
	return nil, Entry{}, errUnbuilt
}

// Discard drops the pending changes to paths (all when none); their paths
// join the forget list. It returns the paths discarded.
func (s *Store) Discard(paths []string) ([]string, error) { return nil, errUnbuilt }
