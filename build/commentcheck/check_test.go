package main

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	got, err := Check(filepath.Join("testdata", "tree"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`dates/dates.go:4: date "2026-12-06"`,
		`dates/dates.go:8: date "Dec 2026"`,
		`dates/dates.go:9: date "December 6, 2026"`,
		`dates/dates.go:13: date "6 Dec. 2026"`,
		`dates/dates.go:14: date "in 2025"`,
		`dates/dates.go:15: date "as of 2024"`,
		`dates/dates.go:16: date "2026/12"`,
		`dates/dates_test.go:3: date "Since 2024"`,
		`nodoc: package nodoc has no package doc comment`,
		`twodocs: package twodocs has 2 package doc comments (a.go, b.go)`,
	}
	var lines []string
	for _, f := range got {
		lines = append(lines, strings.TrimPrefix(filepath.ToSlash(f.String()), "testdata/tree/"))
	}
	if len(lines) != len(want) {
		t.Fatalf("findings:\n%s\nwant %d:\n%s", strings.Join(lines, "\n"), len(want), strings.Join(want, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(lines[i], want[i]) {
			t.Errorf("finding %d:\n%s\nwant it to start\n%s", i, lines[i], want[i])
		}
	}
}
