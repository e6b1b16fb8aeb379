package builder

import (
	"strings"
	"testing"
)

func TestBaseEntries(t *testing.T) {
	byName := map[string]cpioEntry{}
	for _, e := range baseEntries() {
		byName[e.Name] = e
	}
	files := map[string]string{
		"etc/passwd":        "root:x:0:0:root:/root:/bin/sh\nagent:x:1000:1000:agent:/home/agent:/bin/sh\n",
		"etc/group":         "root:x:0:\nagent:x:1000:\n",
		"etc/hostname":      "airlock\n",
		"etc/hosts":         "127.0.0.1 localhost airlock\n",
		"etc/nsswitch.conf": "passwd: files\ngroup: files\nhosts: files\n",
	}
	for name, want := range files {
		if got := string(byName[name].Data); got != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	dirs := []struct {
		name     string
		mode     uint32
		uid, gid uint32
	}{
		{"tmp", modeDir | 0o1777, 0, 0},
		{"root", modeDir | 0o700, 0, 0},
		{"home/agent", modeDir | 0o755, 1000, 1000},
		{"workspace", modeDir | 0o755, 0, 0},
		{"lib/modules", modeDir | 0o755, 0, 0},
		{"usr/sbin", modeDir | 0o755, 0, 0},
	}
	for _, d := range dirs {
		e, ok := byName[d.name]
		if !ok || e.Mode != d.mode || e.UID != d.uid || e.GID != d.gid {
			t.Errorf("%s = %+v, want mode %o owner %d:%d", d.name, e, d.mode, d.uid, d.gid)
		}
	}
	// No resolver: without /etc/resolv.conf (and with "hosts: files") a
	// name lookup in the guest fails at once; only the host gate resolves.
	for _, name := range []string{"etc/resolv.conf"} {
		if _, ok := byName[name]; ok {
			t.Errorf("base entries hold %s", name)
		}
	}
	if c := byName["dev/null"]; c.Mode != modeChar|0o666 || c.RMajor != 1 || c.RMinor != 3 {
		t.Errorf("dev/null = %+v, want char 1,3 mode 0666", c)
	}
	if c := byName["dev/console"]; c.Mode != modeChar|0o600 || c.RMajor != 5 || c.RMinor != 1 {
		t.Errorf("dev/console = %+v, want char 5,1", c)
	}
}

func TestBuildAgentWithoutSource(t *testing.T) {
	err := buildAgent(t.Context(), t.TempDir(), "amd64", "/nonexistent")
	if err == nil || !strings.Contains(err.Error(), "guest/cmd/airlock-guest does not exist") {
		t.Fatalf("buildAgent error %v, want a clear missing-source error", err)
	}
}

func TestBuildAgentWithEmptyPackage(t *testing.T) {
	src := t.TempDir()
	writeFixture(t, src, "guest/cmd/airlock-guest/README", "soon")
	err := buildAgent(t.Context(), src, "arm64", "/nonexistent")
	if err == nil || !strings.Contains(err.Error(), "guest/cmd/airlock-guest has no Go files") {
		t.Fatalf("buildAgent error %v, want a clear no-Go-files error", err)
	}
}
