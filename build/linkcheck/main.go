// Command linkcheck finds what would stop a binary from linking on another
// operating system when the type-check cannot: two cgo packages that
// define the same Objective-C class or C symbol. make check-darwin runs it
// for darwin/arm64 and darwin/amd64 beside build/typecheck, which never
// links.
//
// For every main package of this module among the patterns (the desktop
// app at the module root, app/cmd/airlock, ...) it lists the packages the
// binary links with
//
//	GOOS=<os> GOARCH=<arch> CGO_ENABLED=1 go list -e -deps -json -tags <tags> <patterns>
//
// reads their .c, .m and .h files and the preambles and //export lines of
// their cgo files from the module cache, and prints the Objective-C classes
// and categories each binary's cgo packages define, how many C symbols,
// and every name two packages define. Such a duplicate fails the link
// ("duplicate symbol '_OBJC_CLASS_$_AppDelegate'": vz v3.7.1's
// virtualization_view.m and Wails v2.16.0's AppDelegate.m both implement
// AppDelegate).
//
// The exit status is 1 for a duplicate that is not in the known list
// (known.go), and for a known one that no longer occurs (so the list
// shrinks when the cause is fixed). A known duplicate is printed as KNOWN
// with the issue that tracks it.
//
// Usage:
//
//	go run ./build/linkcheck [-os darwin] [-arch arm64,amd64] [-tags t1,t2] [-C dir] [-v] [packages]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/airlock-sandbox/airlock/build/internal/golist"
)

func main() {
	var o Options
	var verbose bool
	targets := golist.Flags(flag.CommandLine)
	flag.BoolVar(&verbose, "v", false, "also list every C symbol of every binary")
	flag.Parse()
	ts, patterns := targets()
	o.Patterns = patterns
	ok := true
	for _, t := range ts {
		o.Target = t
		bins, err := Check(context.Background(), o)
		if err != nil {
			fmt.Printf("linkcheck %s/%s: %v\n", o.GOOS, o.GOARCH, err)
			ok = false
			continue
		}
		if !report(os.Stdout, o.GOOS+"/"+o.GOARCH, bins, known, verbose) {
			ok = false
		}
	}
	if !ok {
		os.Exit(1)
	}
}

// report prints what each binary's cgo packages define and every
// duplicate, and reports whether none is new and every known one still
// occurs.
func report(w io.Writer, target string, bins []Binary, known []Known, verbose bool) bool {
	v := Verdict(bins, known)
	for _, b := range bins {
		if len(b.CgoPackages) == 0 {
			continue
		}
		fmt.Fprintf(w, "linkcheck %s: %s links %d cgo packages\n", target, b.ImportPath, len(b.CgoPackages))
		for _, pkg := range b.CgoPackages {
			var classes []string
			nc := 0
			for _, s := range b.Defs[pkg] {
				if s.Kind == CSymbol {
					nc++
					continue
				}
				classes = append(classes, s.String())
			}
			fmt.Fprintf(w, "  %s: %d C symbols", pkg, nc)
			if len(classes) > 0 {
				fmt.Fprintf(w, "; %s", strings.Join(classes, ", "))
			}
			fmt.Fprintln(w)
			if verbose {
				for _, s := range b.Defs[pkg] {
					if s.Kind == CSymbol {
						fmt.Fprintf(w, "    %s\n", s.Name)
					}
				}
			}
		}
	}
	for _, k := range v.Known {
		fmt.Fprintf(w, "linkcheck %s: KNOWN duplicate (%s): %s\n", target, k.Known.Why, k.Duplicate)
	}
	for _, d := range v.New {
		fmt.Fprintf(w, "linkcheck %s: DUPLICATE: %s: the binary will not link (or the runtime keeps one of the two at random)\n", target, d)
	}
	for _, k := range v.Stale {
		fmt.Fprintf(w, "linkcheck %s: the known duplicate %s in %s no longer occurs: remove it from build/linkcheck/known.go\n", target, k.Symbol, k.Binary)
	}
	status := "ok"
	if !v.OK() {
		status = "FAIL"
	}
	fmt.Fprintf(w, "linkcheck %s: %d binaries, %d new duplicates, %d known (not failing), %d stale known: %s\n",
		target, len(bins), len(v.New), len(v.Known), len(v.Stale), status)
	return v.OK()
}
