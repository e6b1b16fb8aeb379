package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
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

// watchStall watches the console file at path, from its present end, for a
// kernel's stall report (stallSigns) until ctx ends, and sends the first it
// finds. Only the part written after the call counts: an earlier boot's
// report in the same file (the console is appended to) is not this one's.
func watchStall(ctx context.Context, path string) <-chan string {
	found := make(chan string, 1)
	if path == "" {
		return found
	}
	var from int64
	if fi, err := os.Stat(path); err == nil {
		from = fi.Size()
	}
	go func() {
		tick := time.NewTicker(stallPoll)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if sign := stallIn(path, from); sign != "" {
				found <- sign
				return
			}
		}
	}()
	return found
}

// stallPoll is how often watchStall reads the console.
var stallPoll = time.Second

// stallIn returns the first stall sign in the file at path after offset
// from, reading at most its last 64 KiB, or "".
func stallIn(path string, from int64) string {
	b, _ := readEnd(path, from, 64<<10)
	for _, sign := range stallSigns {
		if bytes.Contains(b, []byte(sign)) {
			return sign
		}
	}
	return ""
}
