package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// The Windows installer and the executables' version resources take their
// version from wails.json's info.productVersion (Wails leaves it at 1.0.0
// when absent); the CLI takes its own from VERSION. They must say the same.
func TestWailsProductVersionIsVERSION(t *testing.T) {
	b, err := os.ReadFile("VERSION")
	if err != nil {
		t.Fatal(err)
	}
	want := strings.TrimSpace(string(b))
	var cfg struct {
		Info struct {
			ProductVersion string `json:"productVersion"`
		} `json:"info"`
	}
	b, err = os.ReadFile("wails.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Info.ProductVersion != want {
		t.Fatalf("wails.json info.productVersion is %q, VERSION says %q: make them the same", cfg.Info.ProductVersion, want)
	}
}
