package service

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"

	"github.com/airlock-sandbox/airlock/app/tasks"
	"github.com/airlock-sandbox/airlock/guest/client"
)

// Terminals is what the service offers a front door that gives a person a
// shell: an interactive task on a PTY in the guest that outlives the
// connection watching it. *Service implements it; a front door finds it
// by type assertion on its Core.
type Terminals interface {
	// OpenTerminal starts a login shell on a terminal of req's size, as a
	// task (it is listed with the others, and Cancel ends it).
	OpenTerminal(ctx context.Context, req TerminalRequest) (tasks.Task, error)
	// AttachTerminal connects to terminal id: the recent screen first,
	// then what the shell writes from then on.
	AttachTerminal(ctx context.Context, id string) (TerminalConn, error)
	// CloseTerminal ends terminal id: the shell and all it started.
	CloseTerminal(ctx context.Context, id string) error

	// ReadTerminal, TerminalInput and ResizeTerminal are the same
	// terminal for a client that cannot hold a connection open (a
	// desktop webview that cannot stream): output by offset, input and
	// size by request.
	ReadTerminal(ctx context.Context, id string, offset int64) (TerminalOutput, error)
	TerminalInput(ctx context.Context, id string, data []byte) error
	ResizeTerminal(ctx context.Context, id string, rows, cols uint16) error
}

// TerminalOutput is a terminal's output from an offset: Data begins at
// Offset (later than asked when what was asked for is no longer kept, or
// the start of the recent screen when a negative offset was asked), and
// Next is where the next read goes on. Ended: the shell is over and Data
// is the last of it.
type TerminalOutput struct {
	Data   []byte `json:"data"`
	Offset int64  `json:"offset"`
	Next   int64  `json:"next"`
	Ended  bool   `json:"ended,omitempty"`
}

var _ Terminals = (*Service)(nil)

// TerminalConn is one connection to a terminal. Closing it leaves the
// shell running.
type TerminalConn interface {
	// Next returns the output that arrived since the last call, waiting
	// for some. io.EOF means the terminal ended; any other error, that
	// this connection is over.
	Next(ctx context.Context) ([]byte, error)
	// Write sends keystrokes (or pasted text) to the shell.
	Write(p []byte) (int, error)
	// Resize sets the terminal's size.
	Resize(rows, cols uint16) error
	Close()
}

// TerminalRequest asks for a terminal.
type TerminalRequest struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
	Root bool   `json:"root,omitempty"`
	Cwd  string `json:"cwd,omitempty"`
}

// TerminalShell is the command a terminal runs: bash when the image has it
// (line editing, history), the image's sh otherwise.
const TerminalShell = `exec "$(command -v bash || echo /bin/sh)" -l`

// Terminal bounds.
const (
	// TerminalScrollback is how much of a terminal's latest output the
	// host keeps, for a page that reattaches.
	TerminalScrollback = 256 << 10
	// terminalBacklog is how much output may wait for one slow
	// attachment; past it the attachment is dropped (it reattaches and
	// gets the scrollback).
	terminalBacklog = 1 << 20
	// MaxTerminalDim bounds a terminal's rows and columns.
	MaxTerminalDim = 1000
)

// ErrNotTerminal means the task is not a terminal this service runs.
var ErrNotTerminal = errors.New("no such terminal: it ended, or the task is not a terminal (open a new one)")

// terminal is the host's end of one interactive task: its input, its
// size, and its recent output for whoever attaches.
type terminal struct {
	stdinR *io.PipeReader
	stdinW *io.PipeWriter
	resize chan client.Size
	size   client.Size
	done   chan struct{} // closed when the task is over

	mu       sync.Mutex
	screen   []byte        // the latest output, at most 2×TerminalScrollback
	total    int64         // bytes written since the start: screen ends there
	changed  chan struct{} // closed and replaced at each write and at the end
	attached map[*TerminalAttachment]struct{}
	ended    bool
}

// OpenTerminal starts a login shell on a PTY of req's size as a task. The
// task runs until the shell exits or CloseTerminal or Cancel ends it;
// connections come and go meanwhile.
func (s *Service) OpenTerminal(_ context.Context, req TerminalRequest) (tasks.Task, error) {
	size, err := terminalSize(req.Rows, req.Cols)
	if err != nil {
		return tasks.Task{}, err
	}
	if reason := s.quota.reason(); reason != "" {
		if reason = s.checkQuota(context.Background(), true); reason != "" {
			return tasks.Task{}, fmt.Errorf("%w: %s", ErrOverQuota, reason)
		}
	}
	term := newTerminal(size)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return tasks.Task{}, ErrClosed
	}
	t, err := s.store.Create(tasks.Command{Shell: TerminalShell, Cwd: req.Cwd, Root: req.Root, TTY: true})
	if err != nil {
		s.mu.Unlock()
		return tasks.Task{}, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &runningTask{cancel: cancel, signal: make(chan int, 2), done: make(chan struct{}), term: term}
	s.running[t.ID] = r
	s.wg.Add(1)
	s.mu.Unlock()
	s.taskBegins()
	go func() {
		defer s.wg.Done()
		defer close(r.done)
		defer cancel()
		defer term.end()
		s.execute(ctx, t.ID, RunRequest{Shell: TerminalShell, Cwd: req.Cwd, Root: req.Root}, nil, r)
		s.mu.Lock()
		delete(s.running, t.ID)
		s.mu.Unlock()
	}()
	return t, nil
}

// terminalSize checks a size a client chose; 0×0 is the guest's default.
func terminalSize(rows, cols uint16) (client.Size, error) {
	if rows > MaxTerminalDim || cols > MaxTerminalDim || (rows == 0) != (cols == 0) {
		return client.Size{}, fmt.Errorf("terminal size %d×%d: rows and columns must both be 1–%d", rows, cols, MaxTerminalDim)
	}
	if rows == 0 {
		return client.Size{Rows: 24, Cols: 80}, nil
	}
	return client.Size{Rows: rows, Cols: cols}, nil
}

func newTerminal(size client.Size) *terminal {
	pr, pw := io.Pipe()
	return &terminal{
		stdinR: pr, stdinW: pw, resize: make(chan client.Size, 1), size: size,
		done: make(chan struct{}), attached: map[*TerminalAttachment]struct{}{}, changed: make(chan struct{}),
	}
}

// connect gives the task the terminal: a PTY of its size, its input, its
// resizes, and its output to the task log as well as to the attachments.
func (t *terminal) connect(spec *client.Spec, stdio *client.Stdio) {
	spec.TTY, spec.Rows, spec.Cols = true, t.size.Rows, t.size.Cols
	stdio.Stdin = t.stdinR
	stdio.Resize = t.resize
	stdio.Stdout = io.MultiWriter(stdio.Stdout, t)
	// A PTY has one output: the guest sends it all as stdout.
}

// Write takes the shell's output: kept as the recent screen and passed to
// every attachment.
func (t *terminal) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.screen = append(t.screen, p...)
	t.total += int64(len(p))
	close(t.changed)
	t.changed = make(chan struct{})
	if len(t.screen) > 2*TerminalScrollback {
		t.screen = append(t.screen[:0], t.screen[len(t.screen)-TerminalScrollback:]...)
	}
	for a := range t.attached {
		if !a.push(p) {
			delete(t.attached, a)
		}
	}
	return len(p), nil
}

// end marks the terminal over: its input is closed and its attachments
// learn it once they have read what came before.
func (t *terminal) end() {
	t.stdinW.CloseWithError(ErrNotTerminal)
	t.mu.Lock()
	t.ended = true
	close(t.changed)
	for a := range t.attached {
		a.finish()
	}
	clear(t.attached)
	t.mu.Unlock()
	close(t.done)
}

// AttachTerminal connects to a running terminal. The attachment's first
// read returns the recent screen (at most TerminalScrollback bytes).
func (s *Service) AttachTerminal(ctx context.Context, id string) (TerminalConn, error) {
	term, err := s.terminal(id)
	if err != nil {
		return nil, err
	}
	a := &TerminalAttachment{term: term, notify: make(chan struct{}, 1)}
	term.mu.Lock()
	defer term.mu.Unlock()
	if term.ended {
		return nil, ErrNotTerminal
	}
	screen := term.screen
	if len(screen) > TerminalScrollback {
		screen = screen[len(screen)-TerminalScrollback:]
	}
	a.push(screen)
	term.attached[a] = struct{}{}
	context.AfterFunc(ctx, a.Close)
	return a, nil
}

// CloseTerminal ends a terminal at once: the guest kills the shell's tree
// when its task call is abandoned. The task ends as killed.
func (s *Service) CloseTerminal(_ context.Context, id string) error {
	s.mu.Lock()
	r, ok := s.running[id]
	if ok && r.term != nil {
		r.cancelled = true
	}
	s.mu.Unlock()
	if !ok || r.term == nil {
		return ErrNotTerminal
	}
	r.cancel()
	<-r.done
	return nil
}

// ReadTerminal returns the output from offset on, waiting until there is
// some, the shell ends, or ctx is done (then Data is empty and Next is
// offset). A negative offset asks for the recent screen.
func (s *Service) ReadTerminal(ctx context.Context, id string, offset int64) (TerminalOutput, error) {
	term, err := s.terminal(id)
	if err != nil {
		return TerminalOutput{}, err
	}
	for {
		term.mu.Lock()
		kept := min(int64(len(term.screen)), TerminalScrollback)
		start := term.total - kept
		from := offset
		if from < start || from > term.total {
			from = start
		}
		out := TerminalOutput{Offset: from, Next: term.total, Ended: term.ended}
		if from < term.total || term.ended {
			out.Data = slices.Clone(term.screen[int64(len(term.screen))-(term.total-from):])
			term.mu.Unlock()
			return out, nil
		}
		changed := term.changed
		term.mu.Unlock()
		select {
		case <-ctx.Done():
			return TerminalOutput{Offset: offset, Next: offset}, nil
		case <-changed:
		}
	}
}

// TerminalInput sends input to terminal id; it waits while the guest
// takes earlier input, at most as long as ctx.
func (s *Service) TerminalInput(ctx context.Context, id string, data []byte) error {
	term, err := s.terminal(id)
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { _, err := term.stdinW.Write(data); done <- err }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		// The write goes on and is taken in order once the guest reads.
		return ctx.Err()
	}
}

// ResizeTerminal sets terminal id's size.
func (s *Service) ResizeTerminal(_ context.Context, id string, rows, cols uint16) error {
	term, err := s.terminal(id)
	if err != nil {
		return err
	}
	return term.setSize(rows, cols)
}

func (s *Service) terminal(id string) (*terminal, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.running[id]
	if !ok || r.term == nil {
		return nil, ErrNotTerminal
	}
	return r.term, nil
}

// TerminalAttachment is one connection to a terminal: it reads the
// shell's output and writes its input. Closing it leaves the shell
// running.
type TerminalAttachment struct {
	term   *terminal
	notify chan struct{}

	mu      sync.Mutex
	pending []byte
	over    error // set when nothing more will come: the reason
}

// push queues output for the reader; false means the reader fell too far
// behind and is cut off.
func (a *TerminalAttachment) push(p []byte) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.over != nil {
		return false
	}
	if len(a.pending)+len(p) > terminalBacklog {
		a.over = errors.New("terminal: output came faster than this connection took it; reattach to see the recent screen")
		a.wake()
		return false
	}
	a.pending = append(a.pending, p...)
	a.wake()
	return true
}

func (a *TerminalAttachment) finish() {
	a.mu.Lock()
	if a.over == nil {
		a.over = io.EOF
	}
	a.mu.Unlock()
	a.wake()
}

func (a *TerminalAttachment) wake() {
	select {
	case a.notify <- struct{}{}:
	default:
	}
}

// Next returns the output that arrived since the last call, waiting for
// some. io.EOF means the terminal ended; any other error, that this
// attachment is over (closed, or too slow).
func (a *TerminalAttachment) Next(ctx context.Context) ([]byte, error) {
	for {
		a.mu.Lock()
		p, over := a.pending, a.over
		a.pending = nil
		a.mu.Unlock()
		if len(p) > 0 {
			return p, nil
		}
		if over != nil {
			return nil, over
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-a.notify:
		}
	}
}

// Write sends keystrokes (or pasted text) to the shell. It waits while
// the guest takes earlier input, and fails once the terminal ended.
func (a *TerminalAttachment) Write(p []byte) (int, error) {
	return a.term.stdinW.Write(p)
}

// Resize sets the terminal's size; the latest size wins over one the
// guest has not applied yet.
func (a *TerminalAttachment) Resize(rows, cols uint16) error { return a.term.setSize(rows, cols) }

func (t *terminal) setSize(rows, cols uint16) error {
	size, err := terminalSize(rows, cols)
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.size = size
	select {
	case <-t.resize:
	default:
	}
	t.resize <- size
	return nil
}

// Close detaches; the shell goes on.
func (a *TerminalAttachment) Close() {
	t := a.term
	t.mu.Lock()
	delete(t.attached, a)
	t.mu.Unlock()
	a.mu.Lock()
	if a.over == nil {
		a.over = errors.New("terminal: detached")
	}
	a.mu.Unlock()
	a.wake()
}

// Done is closed when the terminal's task is over.
func (a *TerminalAttachment) Done() <-chan struct{} { return a.term.done }
