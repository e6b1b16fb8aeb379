// Command commentcheck holds the module's Go comments to two rules that
// make check-comments enforces:
//
//   - A comment says what is true now, so it carries no date: no
//     year-month-day, no month and year, no year after "in", "since" or
//     "as of". Measurements and the history of what was tried belong in
//     docs/performance.md or a commit message, which a comment may cite.
//   - Every package has exactly one package doc comment, in one of its
//     non-test files.
//
// It reads every .go file under the folders it is given, skipping
// testdata, node_modules, vendor and hidden folders, and files marked
// generated. Each finding is printed as file:line with what to do; the
// exit status is 1 when there is one.
//
// Usage:
//
//	go run ./build/commentcheck [dir...]
package main

import (
	"fmt"
	"os"
)

func main() {
	dirs := os.Args[1:]
	if len(dirs) == 0 {
		dirs = []string{"."}
	}
	var n int
	for _, d := range dirs {
		fs, err := Check(d)
		if err != nil {
			fmt.Fprintln(os.Stderr, "commentcheck:", err)
			os.Exit(2)
		}
		for _, f := range fs {
			fmt.Println(f)
		}
		n += len(fs)
	}
	if n > 0 {
		fmt.Fprintf(os.Stderr, "commentcheck: %d findings\n", n)
		os.Exit(1)
	}
}
