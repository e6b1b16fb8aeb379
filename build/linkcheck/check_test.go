package main

import (
	"github.com/airlock-sandbox/airlock/build/internal/golist"

	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func names(syms []Symbol) []string {
	var out []string
	for _, s := range syms {
		out = append(out, s.String())
	}
	slices.Sort(out)
	return out
}

func TestScan(t *testing.T) {
	for _, tc := range []struct {
		file string
		want []string
	}{
		{"delegate.m", []string{
			"C symbol Shown",
			"C symbol attributed",
			"C symbol block",
			"C symbol callback",
			"C symbol canDo",
			"C symbol counter",
			"C symbol namedVar",
			"C symbol newThing",
			"C symbol table",
			"objc category NSApplication(Airlock)",
			"objc class AppDelegate",
		}},
		// Declarations and static inline functions define nothing.
		{"api.h", nil},
	} {
		t.Run(tc.file, func(t *testing.T) {
			src, err := os.ReadFile(filepath.Join("testdata/scan", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if got := names(Scan(src)); !slices.Equal(got, tc.want) {
				t.Errorf("Scan(%s) =\n %q\nwant\n %q", tc.file, got, tc.want)
			}
		})
	}
}

func TestScanGo(t *testing.T) {
	src, err := os.ReadFile("testdata/scan/cgo.go")
	if err != nil {
		t.Fatal(err)
	}
	syms, err := ScanGo("cgo.go", src)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"C symbol fromPreamble", "C symbol goCallback", "objc class PreambleClass"}
	if got := names(syms); !slices.Equal(got, want) {
		t.Errorf("ScanGo = %q, want %q", got, want)
	}
}

// TestCatchesVzWithWails proves the check fails on the combination that
// broke the macOS desktop app: vz and Wails' darwin frontend in one binary
// both implement AppDelegate.
func TestCatchesVzWithWails(t *testing.T) {
	for _, arch := range []string{"arm64", "amd64"} {
		t.Run(arch, func(t *testing.T) {
			bins, err := Check(context.Background(), Options{
				Target:   golist.Target{GOOS: "darwin", GOARCH: arch, Tags: "desktop,production", Dir: "../.."},
				Patterns: []string{"./build/linkcheck/testdata/vzwails"},
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(bins) != 1 {
				t.Fatalf("%d binaries, want the fixture", len(bins))
			}
			var got []string
			for _, d := range bins[0].Duplicates {
				got = append(got, d.String())
			}
			want := "objc class AppDelegate in github.com/airlock-sandbox/airlock/build/linkcheck/testdata/vzwails, defined by " +
				"github.com/Code-Hex/vz/v3 (virtualization_view.m) and github.com/wailsapp/wails/v2/internal/frontend/desktop/darwin (AppDelegate.m)"
			if !slices.Equal(got, []string{want}) {
				t.Fatalf("duplicates = %q, want only\n %q", got, want)
			}
			var out bytes.Buffer
			if report(&out, "darwin/"+arch, bins, nil, false) {
				t.Errorf("report passed with an unknown duplicate:\n%s", out.String())
			}
			if !strings.Contains(out.String(), "DUPLICATE: objc class AppDelegate") {
				t.Errorf("report does not name the duplicate:\n%s", out.String())
			}
		})
	}
}

// TestModule checks this module's darwin binaries as make check-darwin
// does: every duplicate is a known one, and every known one still occurs.
// None is known: the desktop app links no vz (its VM runs in the airlock
// helper process, vm/platform/withvz), so the AppDelegate that vz and
// Wails both define is in no binary twice.
func TestModule(t *testing.T) {
	for _, arch := range []string{"arm64", "amd64"} {
		t.Run(arch, func(t *testing.T) {
			bins, err := Check(context.Background(), Options{
				Target: golist.Target{GOOS: "darwin", GOARCH: arch, Tags: "desktop,production", Dir: "../.."}, Patterns: []string{"./..."},
			})
			if err != nil {
				t.Fatal(err)
			}
			mains := map[string]bool{}
			for _, b := range bins {
				mains[b.ImportPath] = true
			}
			for _, want := range []string{"github.com/airlock-sandbox/airlock", "github.com/airlock-sandbox/airlock/app/cmd/airlock"} {
				if !mains[want] {
					t.Errorf("binary %s not checked; checked %v", want, mains)
				}
			}
			v := Verdict(bins, known)
			for _, d := range v.New {
				t.Errorf("new duplicate: %s", d)
			}
			for _, k := range v.Stale {
				t.Errorf("stale known entry: %s in %s", k.Symbol, k.Binary)
			}
		})
	}
}

func TestVerdict(t *testing.T) {
	dup := func(bin, name string, pkgs ...string) Duplicate {
		return Duplicate{Binary: bin, Symbol: Symbol{ObjCClass, name}, Packages: pkgs}
	}
	k := Known{Binary: "app", Symbol: Symbol{ObjCClass, "AppDelegate"}, Packages: []string{"vz", "wails"}, Why: "issue"}
	for _, tc := range []struct {
		name                string
		bins                []Binary
		known, fresh, stale int
	}{
		{"known", []Binary{{ImportPath: "app", Duplicates: []Duplicate{dup("app", "AppDelegate", "vz", "wails")}}}, 1, 0, 0},
		{"same name, other packages", []Binary{{ImportPath: "app", Duplicates: []Duplicate{dup("app", "AppDelegate", "systray", "wails")}}}, 0, 1, 1},
		{"same pair, other binary", []Binary{{ImportPath: "app"}, {ImportPath: "cli", Duplicates: []Duplicate{dup("cli", "AppDelegate", "vz", "wails")}}}, 0, 1, 1},
		{"fixed", []Binary{{ImportPath: "app"}}, 0, 0, 1},
		{"binary not checked", []Binary{{ImportPath: "cli"}}, 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := Verdict(tc.bins, []Known{k})
			if len(v.Known) != tc.known || len(v.New) != tc.fresh || len(v.Stale) != tc.stale {
				t.Errorf("known %d new %d stale %d, want %d %d %d", len(v.Known), len(v.New), len(v.Stale), tc.known, tc.fresh, tc.stale)
			}
			if v.OK() != (tc.fresh == 0 && tc.stale == 0) {
				t.Errorf("OK() = %t", v.OK())
			}
		})
	}
}
