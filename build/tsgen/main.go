// Command tsgen writes the TypeScript types of the control API from its Go
// types, so the web UI (frontend/src/gen) cannot drift from what app/api
// serves: make tsgen runs it, and make check-tsgen fails when the committed
// files differ from its output.
//
// Each root is a Go type, package path and name joined by a dot. A struct
// root and every named type it reaches are written; an interface root stands
// for the types in its methods' parameters and results (channels by their
// element, context.Context, io and error left out). Each Go package becomes
// one file, named after the package, that imports the others it refers to.
//
// The TypeScript says what encoding/json sends: field names from json tags,
// omitempty and omitzero fields optional, embedded structs flattened, nil
// slices, maps and pointers null, []byte a base64 string, time.Time an RFC
// 3339 string, time.Duration its nanoseconds. A named string or number type
// whose package declares constants of it is the union of their values.
// Doc comments come along.
//
// Usage:
//
//	go run ./build/tsgen -out DIR ROOT...
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	out := flag.String("out", "", "folder to write the .ts files into (required)")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: tsgen -out DIR import/path.Type...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *out == "" || flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	files, err := Generate(".", flag.Args())
	if err != nil {
		fmt.Fprintln(os.Stderr, "tsgen:", err)
		os.Exit(1)
	}
	if err := write(*out, files); err != nil {
		fmt.Fprintln(os.Stderr, "tsgen:", err)
		os.Exit(1)
	}
}

// write replaces the .ts files in dir with files, so a type that is gone
// from Go is gone from dir too.
func write(dir string, files map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	old, err := filepath.Glob(filepath.Join(dir, "*.ts"))
	if err != nil {
		return err
	}
	for _, f := range old {
		if _, keep := files[filepath.Base(f)]; !keep {
			if err := os.Remove(f); err != nil {
				return err
			}
		}
	}
	for name, b := range files {
		if strings.ContainsAny(name, `/\`) {
			return fmt.Errorf("bad file name %q", name)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}
