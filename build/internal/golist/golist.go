// Package golist runs `go list -e -deps -json` for another platform, with
// cgo on, and decodes each package into the caller's own type: the build
// checks (typecheck, linkcheck) read different fields of the same listing.
package golist

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
)

// Target is what to list, and for which platform.
type Target struct {
	GOOS, GOARCH string
	// Tags are comma-separated build tags.
	Tags string
	// Dir is where go list runs (the module, or a folder inside it).
	Dir string
}

// Flags registers the flags both checks take on fs (-os, -arch, -tags,
// -C) and returns a function that, after fs.Parse, gives one Target per
// architecture named and the package patterns (./... when none).
func Flags(fs *flag.FlagSet) func() ([]Target, []string) {
	var t Target
	var arches string
	fs.StringVar(&t.GOOS, "os", "darwin", "target GOOS")
	fs.StringVar(&arches, "arch", "arm64,amd64", "comma-separated target GOARCH list")
	fs.StringVar(&t.Tags, "tags", "", "comma-separated build tags (as for go build -tags)")
	fs.StringVar(&t.Dir, "C", "", "run go list in this folder (default: the current one)")
	return func() ([]Target, []string) {
		var ts []Target
		for _, a := range strings.Split(arches, ",") {
			t.GOARCH = strings.TrimSpace(a)
			ts = append(ts, t)
		}
		patterns := fs.Args()
		if len(patterns) == 0 {
			patterns = []string{"./..."}
		}
		return ts, patterns
	}
}

// Deps lists patterns and their dependencies for t, dependencies first;
// each package is decoded into a new T. go list may download modules it
// needs (the checks read their sources from the module cache).
func Deps[T any](ctx context.Context, t Target, patterns []string) ([]*T, error) {
	args := []string{"list", "-e", "-deps", "-json"}
	if t.Tags != "" {
		args = append(args, "-tags", t.Tags)
	}
	args = append(args, "--")
	args = append(args, patterns...)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = t.Dir
	cmd.Env = append(os.Environ(), "GOOS="+t.GOOS, "GOARCH="+t.GOARCH, "CGO_ENABLED=1", "GOFLAGS=-mod=readonly")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	var pkgs []*T
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		p := new(T)
		if err := dec.Decode(p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go list: decode: %w", err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs, nil
}
