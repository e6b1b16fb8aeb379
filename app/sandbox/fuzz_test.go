package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzConsoleTail reads the tail of a guest console (which the guest
// writes, so anything) the way a failed boot quotes it: no panic, valid
// UTF-8, at most the lines asked for, taken from the last bytes only.
func FuzzConsoleTail(f *testing.F) {
	f.Add([]byte("boot\nairlock-guest: fatal: no transport\n"), int64(4096), 1)
	f.Add([]byte("\r\n\r\n\xff\xfe\n"), int64(3), 2)
	f.Add([]byte(strings.Repeat("x", 10000)), int64(100), 4)
	f.Add([]byte(""), int64(0), 0)
	f.Fuzz(func(t *testing.T, data []byte, limit int64, n int) {
		if limit < 0 || limit > 1<<20 || n < 0 || n > 100 {
			return
		}
		p := filepath.Join(t.TempDir(), "console.log")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		tail := consoleTail(p, limit, n)
		if !utf8.ValidString(tail) {
			t.Fatalf("invalid UTF-8 %q", tail)
		}
		if lines := strings.Count(tail, "\n") + 1; tail != "" && lines > max(n, 1) {
			t.Fatalf("%d lines, asked for %d", lines, n)
		}
		if int64(len(tail)) > 3*limit { // ToValidUTF8 may grow a byte to "?"; never more
			t.Fatalf("tail of %d bytes from the last %d", len(tail), limit)
		}
		hint := consoleHint(p)
		if !utf8.ValidString(hint) {
			t.Fatalf("invalid hint %q", hint)
		}
	})
}
