package settings_test

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/app/egress/policy"
	"github.com/airlock-sandbox/airlock/app/sandbox"
	"github.com/airlock-sandbox/airlock/app/settings"
	"github.com/airlock-sandbox/airlock/app/workspace"
)

// appValidators is the wiring the service layer does: the egress policy
// parser for list entries and the workspace check for the folder.
func appValidators(t *testing.T) settings.Validators {
	t.Helper()
	host, err := workspace.Local(runtime.GOOS)
	if err != nil {
		t.Fatal(err)
	}
	entry := func(s string) error { _, err := policy.ParseEntry(s); return err }
	return settings.Validators{
		Workspace: host.Validate,
		Allow:     entry,
		Deny:      entry,
		MapHost:   func(s string) error { _, err := policy.ParseMapHost(s); return err },
	}
}

func TestWithEgressAndWorkspace(t *testing.T) {
	v := appValidators(t)
	project := t.TempDir()
	good := settings.Default()
	good.Workspace = project
	good.Allow = []string{"github.com", "*.example.com", "10.0.0.0/8:443"}
	good.Deny = []string{"*.com"}
	good.MapHosts = []string{"db.local=10.1.2.3"}
	if err := good.Validate(v); err != nil {
		t.Fatalf("valid settings refused: %v", err)
	}

	path := filepath.Join(t.TempDir(), settings.FileName)
	os.WriteFile(path, []byte(`{
  "workspace": "/",
  "allow": ["github.com", "10.0.0.1/8"],
  "deny": ["exa*mple.com"],
  "map_hosts": ["db.local=not-an-ip"]
}`), 0o600)
	_, err := settings.Load(path, v)
	if err == nil {
		t.Fatal("bad settings loaded")
	}
	lines := strings.Split(err.Error(), "\n")
	wantPrefixes := []string{
		`settings.json: "workspace": folder cannot be shared: / is the root of the file system`,
		`settings.json: "allow"[1]: "10.0.0.1/8": host bits set in CIDR`,
		`settings.json: "deny"[0]: "exa*mple.com": wildcard allowed only`,
		`settings.json: "map_hosts"[0]: "db.local=not-an-ip": map-host ADDR`,
	}
	if len(lines) != len(wantPrefixes) {
		t.Fatalf("error:\n%v", err)
	}
	for i, want := range wantPrefixes {
		if !strings.HasPrefix(lines[i], want) {
			t.Errorf("line %d:\n%s\nwant prefix:\n%s", i, lines[i], want)
		}
	}
	if !errors.Is(err, policy.ErrInvalidEntry) || !errors.Is(err, workspace.ErrRefused) {
		t.Error("validator sentinels are not reachable through errors.Is")
	}
}

func TestDefaultsMatchSandbox(t *testing.T) {
	if settings.DefaultCPUs != sandbox.DefaultCPUs || settings.DefaultMemoryMiB != sandbox.DefaultMemoryMiB {
		t.Fatal("settings and sandbox defaults differ")
	}
}
