// Command typecheck type-checks this module for another operating system,
// cgo included, without that system's C toolchain: make check-darwin runs it
// for darwin/arm64 and darwin/amd64, so the macOS backend (vm/vz, which
// calls github.com/Code-Hex/vz/v3 through cgo) is compiled in all but name
// on Linux.
//
// It lists the packages and their dependencies with
//
//	GOOS=<os> GOARCH=<arch> CGO_ENABLED=1 go list -e -deps -json -tags <tags> <patterns>
//
// and checks them with go/types in dependency order, from source, with
// FakeImportC (every C.name is accepted, so cgo packages check without cgo).
// Dependencies are checked without function bodies and their errors are
// ignored: only the exported API matters to us, and a dependency that
// fails to check still yields the declarations it has, so our own errors
// are never hidden. Errors are reported for this module's packages only,
// test files included; the exit status is 1 when there is one.
//
// Usage:
//
//	go run ./build/typecheck [-os darwin] [-arch arm64,amd64] [-tags t1,t2] [-C dir] [packages]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/build/internal/golist"
)

func main() {
	var o Options
	targets := golist.Flags(flag.CommandLine)
	flag.BoolVar(&o.Verbose, "v", false, "also report how many dependencies had errors")
	flag.Parse()
	ts, patterns := targets()
	o.Patterns = patterns
	failed := false
	for _, t := range ts {
		o.Target = t
		if !run(context.Background(), o, os.Stdout) {
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}

// run checks one target and prints its errors and a summary line to w; it
// reports whether the target is free of errors.
func run(ctx context.Context, o Options, w io.Writer) bool {
	began := time.Now()
	res, err := Check(ctx, o)
	target := o.GOOS + "/" + o.GOARCH
	if err != nil {
		fmt.Fprintf(w, "typecheck %s: %v\n", target, err)
		return false
	}
	for _, e := range res.Errors {
		fmt.Fprintln(w, e)
	}
	status := "ok"
	if len(res.Errors) > 0 {
		status = fmt.Sprintf("%d errors", len(res.Errors))
	}
	fmt.Fprintf(w, "typecheck %s: %d packages of this module (%d with tests), %d dependencies, %.1fs: %s\n",
		target, res.Checked, res.WithTests, res.Deps, time.Since(began).Seconds(), status)
	if o.Verbose && len(res.DepErrors) > 0 {
		fmt.Fprintf(w, "typecheck %s: dependencies with (ignored) errors: %s\n", target, strings.Join(res.DepErrors, ", "))
	}
	return len(res.Errors) == 0
}
