package main

import (
	"github.com/airlock-sandbox/airlock/build/internal/golist"

	"context"
	"strings"
	"testing"
)

// TestCatchesWrongVzCall proves the checker compiles darwin cgo code in all
// but name: a correct vz call passes, and two wrong ones (a slice of the
// concrete device type where vz wants its interface, and a context passed
// to Connect) fail with the errors the Go compiler on a Mac would give.
func TestCatchesWrongVzCall(t *testing.T) {
	for _, arch := range []string{"arm64", "amd64"} {
		t.Run(arch, func(t *testing.T) {
			res, err := Check(context.Background(), Options{
				Target:   golist.Target{GOOS: "darwin", GOARCH: arch, Dir: "../.."},
				Patterns: []string{"./build/typecheck/testdata/vzgood", "./build/typecheck/testdata/vzbad"},
			})
			if err != nil {
				t.Fatal(err)
			}
			if res.Checked != 2 {
				t.Errorf("checked %d packages of the module, want 2 (the fixtures)", res.Checked)
			}
			var got []string
			for _, e := range res.Errors {
				if strings.Contains(e, "vzgood") {
					t.Errorf("error in the correct fixture: %s", e)
				}
				if strings.HasPrefix(e, "build/typecheck/testdata/vzbad/vzbad_darwin.go:") {
					got = append(got, e)
				}
			}
			for _, want := range []string{
				"vzbad_darwin.go:24:50: cannot use []*vz.VirtioSocketDeviceConfiguration{…} (value of type []*vz.VirtioSocketDeviceConfiguration) as []vz.SocketDeviceConfiguration value",
				"vzbad_darwin.go:32:43: too many arguments in call to m.SocketDevices()[0].Connect",
			} {
				if !containsAny(got, want) {
					t.Errorf("no error %q; got %q", want, res.Errors)
				}
			}
			if len(res.Errors) != 2 {
				t.Errorf("%d errors, want 2: %q", len(res.Errors), res.Errors)
			}
		})
	}
}

// TestDarwinBackend checks the macOS backend (with its e2e tests) and its
// platform picker, so
// plain go test catches a broken vz call where make check-darwin is not
// run.
func TestDarwinBackend(t *testing.T) {
	for _, arch := range []string{"arm64", "amd64"} {
		t.Run(arch, func(t *testing.T) {
			res, err := Check(context.Background(), Options{
				Target:   golist.Target{GOOS: "darwin", GOARCH: arch, Tags: "e2e", Dir: "../.."},
				Patterns: []string{"./vm/vz/...", "./vm/platform"},
			})
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range res.Errors {
				t.Error(e)
			}
			if res.Checked < 2 {
				t.Errorf("checked %d packages, want vm/vz and vm/platform", res.Checked)
			}
		})
	}
}

func TestUnknownArch(t *testing.T) {
	if _, err := Check(context.Background(), Options{
		Target: golist.Target{GOOS: "darwin", GOARCH: "pdp11", Dir: "../.."}, Patterns: []string{"./vm"}}); err == nil {
		t.Error("no error for an unknown architecture")
	}
}

func containsAny(list []string, sub string) bool {
	for _, s := range list {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
