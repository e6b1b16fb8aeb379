//go:build e2e

// Package bench measures Airlock against baselines taken in the same run:
// machines here are noisy, so every figure is a ratio. BenchmarkTable runs
// every measurement once (make bench), prints one table and writes it as
// JSON (tests/bench/out/bench.json, or -out / $AIRLOCK_BENCH_OUT) so runs
// can be compared. Benchmarks report; they never fail on a figure.
package bench

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	outFlag    = flag.String("out", "", "write the table as JSON here (default $AIRLOCK_BENCH_OUT, else out/bench.json)")
	roundsFlag = flag.Int("rounds", 0, "rounds of each alternating measurement (default $AIRLOCK_BENCH_ROUNDS, else 3)")
	onlyFlag   = flag.String("only", "", "comma-separated phases to run (default $AIRLOCK_BENCH_ONLY, else all): "+strings.Join(phases, ","))
)

// phases are the parts of the table -only can pick. The boot phase always
// runs when any guest phase does: its floor VM is their baseline. The
// image choices (kernel form, initramfs compression, machine type) run
// only when named.
var phases = []string{"host", "boot", "rtt", "stdout", "egress", "memory", "fs", "changes", "service", "sizes", "choices"}

// want reports whether phase is to run.
func want(phase string) bool {
	only := *onlyFlag
	if only == "" {
		only = os.Getenv("AIRLOCK_BENCH_ONLY")
	}
	if only == "" {
		return phase != "choices"
	}
	return slices.Contains(strings.Split(only, ","), phase)
}

func rounds() int {
	if *roundsFlag > 0 {
		return *roundsFlag
	}
	if n, err := strconv.Atoi(os.Getenv("AIRLOCK_BENCH_ROUNDS")); err == nil && n > 0 {
		return n
	}
	return 3
}

// Target is what issue 9 asks of a figure: its ratio (or, without a
// baseline, its value) at most or at least Limit.
type Target struct {
	Max   bool    `json:"max"` // true: at most Limit; false: at least Limit
	Limit float64 `json:"limit"`
	// OfValue compares the value itself, not the ratio.
	OfValue bool `json:"of_value,omitempty"`
}

func (t *Target) String() string {
	if t == nil {
		return "-"
	}
	op := ">="
	if t.Max {
		op = "<="
	}
	if t.OfValue {
		return fmt.Sprintf("%s %s", op, strconv.FormatFloat(t.Limit, 'g', 4, 64))
	}
	return fmt.Sprintf("ratio %s %.2f", op, t.Limit)
}

func atMost(r float64) *Target  { return &Target{Max: true, Limit: r} }
func atLeast(r float64) *Target { return &Target{Limit: r} }

// Row is one figure of the table. Value and Baseline are medians of their
// samples; Ratio is Value/Baseline.
type Row struct {
	Key             string    `json:"key"` // stable, for comparing runs
	Name            string    `json:"name"`
	Unit            string    `json:"unit"`
	Value           float64   `json:"value"`
	Baseline        float64   `json:"baseline,omitempty"`
	BaselineName    string    `json:"baseline_name,omitempty"`
	Ratio           float64   `json:"ratio,omitempty"`
	Target          *Target   `json:"target,omitempty"`
	OK              *bool     `json:"ok,omitempty"`
	Samples         []float64 `json:"samples,omitempty"`
	BaselineSamples []float64 `json:"baseline_samples,omitempty"`
	Note            string    `json:"note,omitempty"`
}

// hasRatio says whether r has a baseline a ratio can be taken against: one
// measured, and not zero.
func (r *Row) hasRatio() bool {
	return r.BaselineName != "" && r.Baseline != 0 && !math.IsNaN(r.Baseline) && !math.IsNaN(r.Value)
}

// Report is the JSON document.
type Report struct {
	Time     time.Time `json:"time"`
	Commit   string    `json:"commit"`
	GOOS     string    `json:"goos"`
	GOARCH   string    `json:"goarch"`
	CPUs     int       `json:"cpus"`
	Accel    string    `json:"accel,omitempty"`
	Rounds   int       `json:"rounds"`
	Duration float64   `json:"duration_secs"`
	Rows     []Row     `json:"rows"`
}

type table struct {
	mu   sync.Mutex
	rows []Row
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// add records a figure. base may be nil (no baseline: ratio and, unless the
// target is of the value, the verdict are left out).
func (t *table) add(key, name, unit string, vals []float64, baseName string, base []float64, target *Target) *Row {
	r := Row{Key: key, Name: name, Unit: unit, Value: median(vals), Target: target}
	if len(vals) > 1 {
		r.Samples = vals
	}
	if base != nil {
		r.BaselineName, r.Baseline = baseName, median(base)
		if len(base) > 1 {
			r.BaselineSamples = base
		}
		if r.hasRatio() {
			r.Ratio = r.Value / r.Baseline
		}
	}
	// A baseline of nothing (an idle trivial init's VM can take no host CPU
	// at all over a window) leaves the ratio, and a verdict on it, out.
	if target != nil && (target.OfValue || r.hasRatio()) {
		x := r.Ratio
		if target.OfValue {
			x = r.Value
		}
		ok := x >= target.Limit
		if target.Max {
			ok = x <= target.Limit
		}
		r.OK = &ok
	}
	t.mu.Lock()
	t.rows = append(t.rows, r)
	t.mu.Unlock()
	return &t.rows[len(t.rows)-1]
}

func fmtVal(v float64, unit string) string {
	if math.IsNaN(v) {
		return "n/a"
	}
	var s string
	switch {
	case v == 0:
		s = "0"
	case math.Abs(v) >= 100:
		s = strconv.FormatFloat(v, 'f', 0, 64)
	case math.Abs(v) >= 10:
		s = strconv.FormatFloat(v, 'f', 1, 64)
	default:
		s = strconv.FormatFloat(v, 'f', 2, 64)
	}
	return s + " " + unit
}

func (t *table) print(w *os.File) {
	fmt.Fprintf(w, "\n%-46s | %14s | %-44s | %7s | %-13s | %s\n", "figure", "value", "baseline (same run)", "ratio", "target", "ok?")
	fmt.Fprintln(w, strings.Repeat("-", 46)+"-+-"+strings.Repeat("-", 14)+"-+-"+strings.Repeat("-", 44)+"-+-"+strings.Repeat("-", 7)+"-+-"+strings.Repeat("-", 13)+"-+----")
	for _, r := range t.rows {
		base, ratio := "-", "-"
		if r.BaselineName != "" {
			base = fmt.Sprintf("%s %s", fmtVal(r.Baseline, r.Unit), r.BaselineName)
			ratio = "n/a"
			if r.hasRatio() {
				ratio = fmt.Sprintf("%.2f", r.Ratio)
			}
		}
		ok := "-"
		if r.OK != nil {
			ok = map[bool]string{true: "yes", false: "NO"}[*r.OK]
		}
		if len(base) > 44 {
			base = base[:44]
		}
		fmt.Fprintf(w, "%-46s | %14s | %-44s | %7s | %-13s | %s\n", r.Name, fmtVal(r.Value, r.Unit), base, ratio, r.Target, ok)
	}
	fmt.Fprintln(w)
}

func outPath() string {
	if *outFlag != "" {
		return *outFlag
	}
	if p := os.Getenv("AIRLOCK_BENCH_OUT"); p != "" {
		return p
	}
	return filepath.Join("out", "bench.json")
}

func commit() string {
	out, err := exec.Command("git", "describe", "--always", "--dirty").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}

var tableOnce sync.Once

// BenchmarkTable is the whole harness: every figure of issue 9 against its
// baseline, measured in this run. Run it once: -benchtime 1x.
func BenchmarkTable(b *testing.B) {
	tableOnce.Do(func() {
		began := time.Now()
		t := &table{}
		h := &harness{b: b, t: t, rounds: rounds()}
		defer h.cleanup()
		h.run()
		rep := Report{Time: began.UTC(), Commit: commit(), GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, CPUs: runtime.NumCPU(),
			Accel: h.accel, Rounds: h.rounds, Duration: time.Since(began).Seconds(), Rows: t.rows}
		t.print(os.Stdout)
		js, _ := json.MarshalIndent(rep, "", "  ")
		p := outPath()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err == nil {
			if err := os.WriteFile(p, append(js, '\n'), 0o644); err != nil {
				b.Errorf("write %s: %v", p, err)
			}
		}
		fmt.Printf("%s\n(JSON written to %s; %d rounds, %.0f s)\n", js, p, h.rounds, rep.Duration)
		// The ratios as benchmark metrics too, for benchstat.
		for _, r := range t.rows {
			if r.hasRatio() {
				b.ReportMetric(r.Ratio, r.Key+"-ratio")
			}
		}
	})
}
