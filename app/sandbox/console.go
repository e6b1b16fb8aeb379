package sandbox

import (
	"fmt"
	"io"
	"os"
	"strings"
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
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	off := fi.Size() - max
	if off < 0 {
		off = 0
	}
	b, err := io.ReadAll(io.NewSectionReader(f, off, max))
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(strings.ToValidUTF8(string(b), "?"), "\n"), "\n")
	if off > 0 && len(lines) > 1 {
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
