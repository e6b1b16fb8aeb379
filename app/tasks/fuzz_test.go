package tasks

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// FuzzReopenLog hands Open a task log in any state a crash, a full disk or
// a tampered file can leave it (the output in it came from the guest), with
// metadata that claims any size: Open must not panic, must cut the log back
// to intact records, and what ReadFrom returns must agree with the task's
// counters byte for byte.
func FuzzReopenLog(f *testing.F) {
	good := appendRecords(appendRecords(nil, Stdout, []byte("hello\n")), Stderr, bytes.Repeat([]byte("e"), 70000))
	f.Add(good, int64(0))
	f.Add(good[:len(good)-3], int64(len(good)))
	f.Add(append(append([]byte{}, good...), 0xA7, 1, 0, 0), int64(14))
	f.Add([]byte{0xA7, 1, 1, 0, 0, 0, 0, 0, 'x'}, int64(-5))
	f.Fuzz(func(t *testing.T, log []byte, claimed int64) {
		dir := t.TempDir()
		now := time.Unix(1700000000, 0)
		tk := Task{ID: "aaaaaaaa", State: Running, Created: now, Started: now, Command: Command{Shell: "x"}}
		// The metadata's counters agree with its LogBytes, as the store
		// writes them; LogBytes itself may be anything.
		tk.Output.LogBytes = claimed
		for off := int64(0); off < claimed; {
			if off >= int64(len(log)) {
				break
			}
			st, p, n, ok := parseRecord(log[off:])
			if !ok {
				return // a claimed size inside damage: not a state the store writes
			}
			if st == Stdout {
				tk.Output.Stdout += int64(len(p))
			} else {
				tk.Output.Stderr += int64(len(p))
			}
			off += int64(n)
			if off > claimed {
				return // a claimed size inside a record
			}
		}
		m, _ := json.Marshal(meta{Version: metaVersion, Task: tk})
		os.WriteFile(filepath.Join(dir, "aaaaaaaa.json"), m, 0o600)
		os.WriteFile(filepath.Join(dir, "aaaaaaaa.log"), log, 0o600)
		s, err := Open(dir, Options{Logger: slog.New(slog.DiscardHandler), Now: func() time.Time { return now }})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		got, err := s.Get("aaaaaaaa")
		if err != nil {
			return // refused as damaged: fine, as long as nothing panicked
		}
		if got.State != Lost {
			t.Fatalf("a task left running came back %s", got.State)
		}
		var out, errOut int64
		off := int64(0)
		for {
			chunks, next, err := s.ReadFrom(got.ID, off)
			if err != nil {
				t.Fatalf("read at %d: %v", off, err)
			}
			if len(chunks) == 0 {
				break
			}
			for _, c := range chunks {
				if c.Stream == Stdout {
					out += int64(len(c.Data))
				} else {
					errOut += int64(len(c.Data))
				}
			}
			off = next
		}
		if off != got.Output.LogBytes || out != got.Output.Stdout || errOut != got.Output.Stderr {
			t.Fatalf("log reads %d bytes (%d out, %d err), task says %+v", off, out, errOut, got.Output)
		}
		if fi, err := os.Stat(filepath.Join(dir, "aaaaaaaa.log")); err == nil && fi.Size() != off {
			t.Fatalf("log file of %d bytes, %d of them intact", fi.Size(), off)
		}
	})
}
