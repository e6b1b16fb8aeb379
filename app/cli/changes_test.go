//go:build !windows

package cli

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/app/changes"
	"github.com/airlock-sandbox/airlock/app/service"
)

// TestChangesListingEscapesGuestNames: every path the guest chose reaches
// the terminal escaped, in the listing, an apply's report and a diff.
func TestChangesListingEscapesGuestNames(t *testing.T) {
	var l service.ChangesList
	l.Mode = changes.Review
	for _, name := range hostile {
		l.Entries = append(l.Entries, changes.Entry{Path: name, Kind: changes.Added, Type: changes.File, Size: 2048, Text: true, LinesAdded: 3})
	}
	l.Entries = append(l.Entries, changes.Entry{Path: "new", From: hostile[0], Kind: changes.Renamed, Type: changes.File, Conflict: true, HostRuns: true})
	var out bytes.Buffer
	writeChanges(&out, l, "/home/u/w", true)
	if r, ok := rawControl(out.String()); ok {
		t.Fatalf("raw %U in the listing:\n%s", r, out.String())
	}
	for _, want := range []string{"added", "2.0 KiB", "+3 -0", "conflict: you changed it too", "your tools run it", "airlock diff --workspace /home/u/w"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("listing lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	writeApply(&out, changes.ApplyResult{Checkpoint: "c1", Applied: hostile, Conflicts: hostile, Refused: []changes.Refusal{{Path: hostile[1], Reason: hostile[2]}}})
	if r, ok := rawControl(out.String()); ok {
		t.Fatalf("raw %U in the apply report:\n%s", r, out.String())
	}
	out.Reset()
	pw := newPrintableWriter(&out)
	for _, name := range hostile {
		pw.Write([]byte("+++ b/" + name + "\n+\tkept tab\x1b[2J\n"))
	}
	pw.Write([]byte("no end"))
	pw.Flush()
	if r, ok := rawControl(strings.ReplaceAll(out.String(), "\t", "")); ok {
		t.Fatalf("raw %U in the diff:\n%s", r, out.String())
	}
	if !strings.Contains(out.String(), "+\tkept tab\\x1b[2J\n") || !strings.HasSuffix(out.String(), "no end") {
		t.Errorf("the diff's tabs and lines are not kept:\n%q", out.String())
	}
}

func TestRelPaths(t *testing.T) {
	got := relPaths("/home/u/w", []string{"a.txt", "./b/c", "/home/u/w/d/e", "/home/u/other", "f/"})
	want := []string{"a.txt", "b/c", "d/e", "/home/u/other", "f"}
	if !slices.Equal(got, want) {
		t.Errorf("relPaths = %q, want %q", got, want)
	}
}
