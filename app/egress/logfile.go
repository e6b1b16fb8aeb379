package egress

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
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
