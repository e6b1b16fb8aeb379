package tasks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
)

// readLimit bounds one ReadFrom answer; it holds at least one record.
const readLimit = 1 << 20

// piecePayload is the most output framed and written per system call, so
// the framing buffer a live task keeps stays within 256 KiB.
const piecePayload = 4 * MaxPayload

// Stdout returns the writer for a task's standard output, ready for
// guest/client.Stdio. See Store.Write for its error behaviour.
func (s *Store) Stdout(id string) io.Writer { return s.writer(id, Stdout) }

// Stderr returns the writer for a task's standard error.
func (s *Store) Stderr(id string) io.Writer { return s.writer(id, Stderr) }

func (s *Store) writer(id string, stream Stream) io.Writer {
	t, err := s.lookup(id)
	return streamWriter{s: s, t: t, id: id, stream: stream, err: err}
}

type streamWriter struct {
	s      *Store
	t      *task
	id     string
	stream Stream
	err    error
}

func (w streamWriter) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, fmt.Errorf("tasks: write %s %s: %w", w.id, w.stream, w.err)
	}
	return w.s.append(w.t, w.stream, p)
}

// append frames p as records and writes them (one system call per 256 KiB),
// so the output is with the OS (and survives a crash of this process) when
// Write returns. There is no fsync per write: a power loss may lose the tail,
// which Open then trims to the last intact record.
//
// A failing write (a full disk) must not end the task: the log is cut back
// to where this Write began, its bytes are counted in Output.Dropped, the
// first error is kept in Output.Error, and Write still reports success so
// the guest stream goes on. Later writes try again. Output that would take
// the log past Options.MaxTaskBytes is dropped the same way, after one
// stderr record saying so (truncatedNote) and Output.Truncated set: the task
// keeps running, its output drained and discarded. Only ErrFinal and
// ErrClosed are returned.
func (s *Store) append(t *task, stream Stream, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.t.State.Final() {
		return 0, fmt.Errorf("tasks: write %s %s: %w", t.t.ID, stream, ErrFinal)
	}
	if s.closed.Load() {
		return 0, fmt.Errorf("tasks: write %s %s: %w", t.t.ID, stream, ErrClosed)
	}
	if t.file == nil || t.t.Output.Truncated {
		t.t.Output.Dropped += int64(len(p))
		t.dirty = true
		return len(p), nil
	}
	if note := s.truncatedNote(); t.t.Output.LogBytes+int64(recordsLen(len(p))) > s.opt.MaxTaskBytes-int64(recordsLen(len(note))) {
		t.t.Output.Truncated = true
		t.t.Output.Dropped += int64(len(p))
		t.dirty = true
		s.writeRecords(t, Stderr, []byte(note))
		return len(p), nil
	}
	s.writeRecords(t, stream, p)
	return len(p), nil
}

// truncatedNote is the stderr record that ends a log cut at its bound; a
// client that streams the task shows it like the task's own stderr.
func (s *Store) truncatedNote() string {
	limit := fmt.Sprintf("%d MiB", s.opt.MaxTaskBytes>>20)
	if s.opt.MaxTaskBytes < 1<<20 {
		limit = fmt.Sprintf("%d KiB", s.opt.MaxTaskBytes>>10)
	}
	return "\nairlock: this task's output passed its limit of " + limit + " (task_log_max_mib in the settings); " +
		"the rest is discarded while the task keeps running\n"
}

// writeRecords writes p as records of stream and accounts for them; on an
// error it cuts the log back and counts p as dropped (see append).
func (s *Store) writeRecords(t *task, stream Stream, p []byte) {
	at := t.t.Output.LogBytes
	var err error
	vw, vector := t.file.(vectorWriter)
	for rest := p; len(rest) > 0 && err == nil; {
		n := min(len(rest), piecePayload)
		if vector {
			t.vec = recordVec(t.vec[:0], t.hdrs[:], stream, rest[:n])
			err = vw.writeVec(t.vec)
			clear(t.vec) // no reference to the caller's buffer stays
		} else {
			t.buf = appendRecords(t.buf[:0], stream, rest[:n])
			_, err = t.file.Write(t.buf)
		}
		rest = rest[n:]
	}
	if err != nil {
		s.noteError(t, fmt.Errorf("write log: %w", err))
		t.t.Output.Dropped += int64(len(p))
		t.dirty = true
		if terr := t.file.Truncate(at); terr != nil {
			// The tail may hold part of a record; appending after it would
			// bury good records behind a damaged one, so stop logging.
			s.noteError(t, fmt.Errorf("cut log back after a failed write: %w", terr))
			_ = t.file.Close()
			t.file = nil
		}
		return
	}
	n := int64(recordsLen(len(p)))
	t.t.Output.LogBytes += n
	s.logBytes.Add(n)
	if stream == Stdout {
		t.t.Output.Stdout += int64(len(p))
	} else {
		t.t.Output.Stderr += int64(len(p))
	}
	t.notify()
	s.hub.publish(func() Event {
		return Event{Kind: EventOutput, Task: t.t, Stream: stream, Offset: at, Len: len(p)}
	})
}

// ReadFrom returns the records of a task's log from offset (0, or a
// Chunk.End / next value from an earlier call) and the offset to resume
// from. It returns at most about 1 MiB per call; no chunks means the reader
// is at the end of what has been written so far.
func (s *Store) ReadFrom(id string, offset int64) ([]Chunk, int64, error) {
	_, size, err := s.checkOffset(id, offset)
	if err != nil {
		return nil, offset, fmt.Errorf("tasks: read %s: %w", id, err)
	}
	if offset == size {
		return nil, offset, nil
	}
	f, err := os.Open(s.logPath(id))
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			err = ErrNotFound
		}
		return nil, offset, fmt.Errorf("tasks: read %s: %w", id, err)
	}
	defer f.Close()
	chunks, next, err := readRecords(f, offset, size)
	if err != nil {
		return nil, offset, fmt.Errorf("tasks: read %s: %w", id, err)
	}
	return chunks, next, nil
}

// Follow streams a task's log from offset: what is there, then output as it
// arrives. The channel closes once the task is final and everything has
// been sent, or when ctx ends, the Store closes, or the log cannot be read
// (logged).
func (s *Store) Follow(ctx context.Context, id string, offset int64) (<-chan Chunk, error) {
	t, _, err := s.checkOffset(id, offset)
	if err != nil {
		return nil, fmt.Errorf("tasks: follow %s: %w", id, err)
	}
	f, err := os.Open(s.logPath(id))
	if err != nil {
		return nil, fmt.Errorf("tasks: follow %s: %w", id, err)
	}
	s.mu.Lock() // orders Add against Close's Wait
	if s.closed.Load() {
		s.mu.Unlock()
		f.Close()
		return nil, fmt.Errorf("tasks: follow %s: %w", id, ErrClosed)
	}
	s.wg.Add(1)
	s.mu.Unlock()
	ch := make(chan Chunk, 16)
	go s.follow(ctx, t, f, offset, ch)
	return ch, nil
}

func (s *Store) follow(ctx context.Context, t *task, f *os.File, off int64, ch chan<- Chunk) {
	defer s.wg.Done()
	defer f.Close()
	defer close(ch)
	for {
		t.mu.Lock()
		size, final, wake := t.t.Output.LogBytes, t.t.State.Final(), t.waitChan()
		t.mu.Unlock()
		if off >= size {
			if final {
				return
			}
			select {
			case <-wake:
				continue
			case <-ctx.Done():
				return
			case <-s.done:
				return
			}
		}
		chunks, next, err := readRecords(f, off, size)
		if err != nil {
			s.log.Warn("tasks: follow: read log", "task", t.t.ID, "offset", off, "err", err)
			return
		}
		for _, c := range chunks {
			select {
			case ch <- c:
			case <-ctx.Done():
				return
			case <-s.done:
				return
			}
		}
		off = next
	}
}

// checkOffset finds the task and checks offset against its committed size.
func (s *Store) checkOffset(id string, offset int64) (*task, int64, error) {
	t, err := s.lookup(id)
	if err != nil {
		return nil, 0, err
	}
	t.mu.Lock()
	size := t.t.Output.LogBytes
	t.mu.Unlock()
	if offset < 0 || offset > size {
		return nil, 0, fmt.Errorf("%w: %d is outside 0..%d", ErrOffset, offset, size)
	}
	return t, size, nil
}

// readRecords decodes the intact records in [off, end) of a log, reading at
// most readLimit bytes. Only committed bytes are ever passed as end, so a
// damaged record here means off is not at a record start.
func readRecords(f io.ReaderAt, off, end int64) ([]Chunk, int64, error) {
	chunks, next, bad, err := scanRecords(f, off, end)
	if err == nil && bad && len(chunks) == 0 {
		err = fmt.Errorf("%w: no intact record at %d", ErrOffset, off)
	}
	return chunks, next, err
}

// scanRecords walks records from off towards end within one read window.
// bad reports a record that is damaged or cut short by end; next is where
// the intact run stops.
func scanRecords(f io.ReaderAt, off, end int64) (chunks []Chunk, next int64, bad bool, err error) {
	n := min(end-off, readLimit)
	if n <= 0 {
		return nil, off, false, nil
	}
	buf := make([]byte, n)
	if m, err := f.ReadAt(buf, off); m < len(buf) {
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, off, false, fmt.Errorf("read log at %d: %w", off, err)
	}
	pos := 0
	for pos < len(buf) {
		stream, payload, size, ok := parseRecord(buf[pos:])
		if !ok {
			// A record that continues past this window but within end is
			// read next time; anything else is damage.
			whole := size > 0 && off+int64(pos+size) <= end && len(buf) == readLimit
			return chunks, off + int64(pos), !whole, nil
		}
		chunks = append(chunks, Chunk{Offset: off + int64(pos), Stream: stream, Data: payload})
		pos += size
	}
	return chunks, off + int64(pos), false, nil
}
