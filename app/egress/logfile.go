package egress

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strconv"
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
	f      *os.File
	size   int64
	failed bool // a write or rotation error was already logged
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
// ignored: the gate does not stop because its log cannot be written.
func (l *logFile) write(line []byte) {
	if l.f == nil && l.open() != nil {
		return // reopening after a failed rotation failed again: logged already
	}
	if l.size > 0 && l.size+int64(len(line)) > l.max {
		if err := l.rotate(); err != nil {
			l.fail("rotate decision log", err)
			if l.f == nil {
				return
			}
		}
	}
	n, err := l.f.Write(line)
	l.size += int64(n)
	if err != nil {
		l.fail("write decision log", err)
	}
}

// rotate moves the full log aside and starts a new one. When another
// process rotated the file already (the path is not the file this one
// writes), it only reopens the path.
func (l *logFile) rotate() error {
	mine, err := l.f.Stat()
	if err != nil {
		return err
	}
	cur, err := os.Stat(l.path)
	if err == nil && os.SameFile(mine, cur) {
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
	l.f.Close()
	l.f = nil
	return l.open()
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
