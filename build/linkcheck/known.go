package main

import "slices"

// Known is a duplicate an issue already tracks: it is printed, and does not
// fail the check. It names the binary, the symbol and the exact packages,
// so any other duplicate, even of the same name, still fails.
type Known struct {
	Binary   string
	Symbol   Symbol
	Packages []string // sorted
	Why      string
}

// known are the duplicates make check-darwin reports without failing. It
// is empty: the desktop app runs its VM in the airlock helper process
// (vm/platform/withvz, issue 30 item 1) and links no vz, so Wails's
// AppDelegate is its only one.
var known = []Known{}

// KnownHit is a known entry and the duplicate it matched.
type KnownHit struct {
	Known     Known
	Duplicate Duplicate
}

// Result sorts a target's duplicates into known and new ones, and the
// known entries that matched nothing.
type Result struct {
	Known []KnownHit
	New   []Duplicate
	Stale []Known
}

// OK reports whether the check passes: no new duplicate, no stale entry.
func (r Result) OK() bool { return len(r.New) == 0 && len(r.Stale) == 0 }

// Verdict matches bins' duplicates against known. An entry is stale when
// its binary was checked and no longer has the duplicate; an entry for a
// binary not among bins is neither matched nor stale.
func Verdict(bins []Binary, known []Known) Result {
	var r Result
	used := make([]bool, len(known))
	checked := map[string]bool{}
	for _, b := range bins {
		checked[b.ImportPath] = true
		for _, d := range b.Duplicates {
			i := slices.IndexFunc(known, func(k Known) bool {
				return k.Binary == d.Binary && k.Symbol == d.Symbol && slices.Equal(k.Packages, d.Packages)
			})
			if i < 0 {
				r.New = append(r.New, d)
				continue
			}
			used[i] = true
			r.Known = append(r.Known, KnownHit{known[i], d})
		}
	}
	for i, k := range known {
		if !used[i] && checked[k.Binary] {
			r.Stale = append(r.Stale, k)
		}
	}
	return r
}
