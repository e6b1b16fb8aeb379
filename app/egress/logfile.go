package egress

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"time"
)

// DefaultLogMaxBytes is the size at which the decision log is rotated when
// Config.LogMaxBytes is zero.
const DefaultLogMaxBytes = 32 << 20

// LogKeep is how many rotated decision logs are kept (FILE.1 the newest,
// up to FILE.2), so the log takes at most (LogKeep+1) × its bound.
const LogKeep = 2

// logFile is the decision log on disk: appended to, and rotated to FILE.1
// (FILE.1 to FILE.2, and so on up to LogKeep) before a line would take it
// past max bytes.
type logFile struct {
	path   string
	max    int64
	logger *slog.Logger
	f      *os.File // nil after a failed rotation
	size   int64
	retry  time.Time // no rotation is tried before then
	failed bool      // a write or rotation error was already logged
}

func openLogFile(path string, max int64, logger *slog.Logger) (*logFile, error) {
	if max <= 0 {
		max = DefaultLogMaxBytes
	}
	l := &logFile{path: path, max: max, logger: logger}
	if err := l.open(); err != nil {
		return nil, fmt.Errorf("egress: open decision log: %w", err)
	}
	return l, nil
}

func (l *logFile) open() error {
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	l.f, l.size = f, fi.Size()
	return nil
}

// write appends one line with a single write, so lines from several
// processes never interleave. Errors are logged once and otherwise
// ignored: the gate does not stop because its log cannot be written. A
// line that would take the file past its bound when it cannot be rotated
// is dropped, so the bound holds either way; rotation is tried again at
// most once a second.
func (l *logFile) write(line []byte) {
	n := int64(len(line))
	if l.f == nil || l.size > 0 && l.size+n > l.max {
		if time.Now().Before(l.retry) {
			return
		}
		if err := l.makeRoom(n); err != nil {
			l.retry = time.Now().Add(time.Second)
			l.fail("rotate decision log", err)
			return
		}
	}
	w, err := l.f.Write(line)
	l.size += int64(w)
	if err != nil {
		l.fail("write decision log", err)
	}
}

// makeRoom (re)opens the log and rotates it when n more bytes would take
// it past its bound. When another process rotated the file already (the
// path is not the file this one writes), reopening the path is enough. The
// file is closed before it is renamed: Windows does not rename open files.
func (l *logFile) makeRoom(n int64) error {
	if l.f == nil {
		if err := l.open(); err != nil {
			return err
		}
	}
	if l.size == 0 || l.size+n <= l.max {
		return nil
	}
	mine, err := l.f.Stat()
	l.f.Close()
	l.f = nil
	if err != nil {
		return err
	}
	if cur, err := os.Stat(l.path); err == nil && os.SameFile(mine, cur) {
		for i := LogKeep - 1; i >= 1; i-- {
			err := os.Rename(l.path+"."+strconv.Itoa(i), l.path+"."+strconv.Itoa(i+1))
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
		if err := os.Rename(l.path, l.path+".1"); err != nil {
			return err
		}
	}
	if err := l.open(); err != nil {
		return err
	}
	if l.size > 0 && l.size+n > l.max {
		return fmt.Errorf("%s is still full after rotation", l.path)
	}
	return nil
}

func (l *logFile) fail(what string, err error) {
	if !l.failed {
		l.failed = true
		l.logger.Error("egress: "+what, "path", l.path, "err", err)
	}
}

func (l *logFile) close() error {
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	if err != nil {
		return fmt.Errorf("egress: close decision log: %w", err)
	}
	return nil
}

// tailBlock is how much of a log file is read back at a time.
const tailBlock = 64 << 10

// maxTailLine bounds a line read back from the log; a longer one is not a
// decision this package wrote, and is skipped.
const maxTailLine = 64 << 10

// loadTail reads back the last n decisions of the log at path and its
// rotated files (newest file first), oldest first, so a gate that opens an
// existing log keeps its history and goes on numbering after it. Lines
// that do not parse (a line cut short by a crash, a foreign line) are
// skipped. A missing file ends the search without error.
func loadTail(path string, n int) ([]Decision, error) {
	var rev []Decision // newest first
	for i := 0; i <= LogKeep && len(rev) < n; i++ {
		name := path
		if i > 0 {
			name = path + "." + strconv.Itoa(i)
		}
		err := eachLineBackwards(name, func(line []byte) bool {
			var d Decision
			if json.Unmarshal(line, &d) == nil && d.Seq > 0 {
				rev = append(rev, d)
			}
			return len(rev) < n
		})
		if errors.Is(err, fs.ErrNotExist) {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	slices.Reverse(rev)
	return rev, nil
}

// eachLineBackwards calls fn with the lines of the file at name, last
// first, until fn returns false. It reads the file from its end, one block
// at a time, so a long log costs only the lines wanted.
func eachLineBackwards(name string, fn func([]byte) bool) error {
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	var (
		off  = fi.Size()
		rest []byte // the start of the line cut by the previous block
		skip bool   // rest belongs to an over-long line
		buf  = make([]byte, tailBlock)
	)
	for off > 0 {
		k := int64(len(buf))
		if off < k {
			k = off
		}
		off -= k
		if _, err := f.ReadAt(buf[:k], off); err != nil {
			return err
		}
		chunk := append(append([]byte(nil), buf[:k]...), rest...)
		for {
			i := bytes.LastIndexByte(chunk, '\n')
			if i < 0 {
				break
			}
			line := chunk[i+1:]
			chunk = chunk[:i]
			if skip {
				skip = false
				continue
			}
			if len(bytes.TrimSpace(line)) > 0 && !fn(line) {
				return nil
			}
		}
		rest = chunk
		if len(rest) > maxTailLine {
			rest, skip = nil, true
		}
	}
	if !skip && len(bytes.TrimSpace(rest)) > 0 {
		fn(rest)
	}
	return nil
}
