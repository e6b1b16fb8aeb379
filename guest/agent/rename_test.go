//go:build linux

package agent

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// renameBenchEnv makes the test binary rename a file back and forth
// AIRLOCK_RENAME_BENCH times in the folder given as its argument, in
// the way its second argument names, and print the nanoseconds it took.
const renameBenchEnv = "AIRLOCK_RENAME_BENCH"

func init() {
	n, err := strconv.Atoi(os.Getenv(renameBenchEnv))
	if err != nil {
		return
	}
	dir, how := os.Args[1], os.Args[2]
	a, b := filepath.Join(dir, "x"), filepath.Join(dir, "y")
	if how == "across" {
		os.Mkdir(filepath.Join(dir, "d1"), 0o755)
		os.Mkdir(filepath.Join(dir, "d2"), 0o755)
		a, b = filepath.Join(dir, "d1", "x"), filepath.Join(dir, "d2", "x")
	}
	if err := os.WriteFile(a, nil, 0o644); err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	start := time.Now()
	for i := 0; i < n; i++ {
		if err := unix.Rename(a, b); err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		a, b = b, a
	}
	fmt.Println(time.Since(start).Nanoseconds())
	os.Exit(0)
}

// BenchmarkRename measures a rename in the workspace done by the agent for
// a restricted task (rename.go), within one folder and between two, and
// reports it as a multiple of a plain rename measured in the same run:
// x-plain.
func BenchmarkRename(b *testing.B) {
	for _, how := range []string{"same", "across"} {
		b.Run(how, func(b *testing.B) {
			ws := b.TempDir()
			rules, _, err := newTaskRules(ws)
			if err != nil {
				b.Fatal(err)
			}
			run := func(restricted bool) float64 {
				dir, err := os.MkdirTemp(ws, "r")
				if err != nil {
					b.Fatal(err)
				}
				cmd := exec.Command(os.Args[0], dir, how)
				cmd.Env = append(os.Environ(), renameBenchEnv+"="+strconv.Itoa(b.N))
				var out []byte
				if restricted {
					out, _, err = runRestricted(rules, cmd)
				} else {
					out, err = cmd.CombinedOutput()
				}
				ns, perr := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
				if err != nil || perr != nil {
					b.Fatalf("%v %v: %s", err, perr, out)
				}
				return ns / float64(b.N)
			}
			plain := run(false)
			agent := run(true)
			b.ReportMetric(plain, "plain-ns/rename")
			b.ReportMetric(agent, "ns/rename")
			b.ReportMetric(agent/plain, "x-plain")
		})
	}
}
