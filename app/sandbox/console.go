package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/guest/api"
)

// consoleHint returns the last lines of the guest console, formatted to be
// appended to an error, so a failed boot explains itself.
func consoleHint(path string) string {
	if path == "" {
		return ""
	}
	tail := consoleTail(path, 4096, 1)
	if tail == "" {
		return "; the guest console (" + path + ") is empty"
	}
	return fmt.Sprintf("; the guest console (%s) ends with %q", path, tail)
}

// consoleTail returns at most the last n lines of the final max bytes of the
// file at path, or "" when there is nothing to show.
func consoleTail(path string, max int64, n int) string {
	b, cut := readEnd(path, 0, max)
	if len(b) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimRight(strings.ToValidUTF8(string(b), "?"), "\n"), "\n")
	if cut && len(lines) > 1 {
		lines = lines[1:] // the first line is probably cut
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, "\r")
	}
	return strings.Join(lines, "\n")
}

// readEnd returns what the file at path holds after offset from, at most its
// last max bytes (cut is set when that left out some of it); nil when it
// cannot be read or holds nothing more.
func readEnd(path string, from, max int64) (b []byte, cut bool) {
	f, err := os.Open(path)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.Size() <= from {
		return nil, false
	}
	if fi.Size()-from > max {
		from, cut = fi.Size()-max, true
	}
	b, err = io.ReadAll(io.NewSectionReader(f, from, fi.Size()-from))
	if err != nil {
		return nil, false
	}
	return b, cut
}

// watchStall watches the console file at path for a
// kernel's stall report (stallSigns) until ctx ends, and sends the first it
// finds, described. With initDeadline > 0 it also reports a kernel that has
// not started init by then (no api.InitRunning line, nor api.Woken from a
// guest started from a saved state): under TCG on a loaded
// host a kernel now and then hangs early with nothing on its quiet console.
// Only the part from offset from on counts (consoleEnd before the machine
// starts): an earlier boot's lines in the same file (the console is
// appended to) are not this one's.
func watchStall(ctx context.Context, path string, from int64, initDeadline time.Duration) <-chan string {
	found := make(chan string, 1)
	if path == "" {
		return found
	}
	began := time.Now()
	go func() {
		tick := time.NewTicker(stallPoll)
		defer tick.Stop()
		initSeen := initDeadline <= 0
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			b, _ := readEnd(path, from, 64<<10)
			if sign := stallIn(b); sign != "" {
				found <- fmt.Sprintf("the console says %q", sign)
				return
			}
			if !initSeen {
				// The line comes early and the boot's output is small, so
				// the last 64 KiB hold it until long after the deadline.
				initSeen = bytes.Contains(b, []byte(api.InitRunning)) || bytes.Contains(b, []byte(api.Woken))
				if !initSeen && time.Since(began) >= initDeadline {
					found <- fmt.Sprintf("the kernel had not started init after %s", initDeadline)
					return
				}
			}
		}
	}()
	return found
}

// consoleEnd is the size of the console file at path, 0 if there is none.
func consoleEnd(path string) int64 {
	if fi, err := os.Stat(path); err == nil {
		return fi.Size()
	}
	return 0
}

// stallPoll is how often watchStall reads the console.
var stallPoll = time.Second

// stallIn returns the first stall sign in b, or "".
func stallIn(b []byte) string {
	for _, sign := range stallSigns {
		if bytes.Contains(b, []byte(sign)) {
			return sign
		}
	}
	return ""
}
