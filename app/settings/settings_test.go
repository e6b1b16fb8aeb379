package settings

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = os.Getenv("UPDATE_GOLDEN") != ""

func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), FileName)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestMissingFileGivesDefaults(t *testing.T) {
	s, err := Load(filepath.Join(t.TempDir(), "none", FileName), Validators{})
	if err != nil {
		t.Fatal(err)
	}
	if s.CPUs != DefaultCPUs || s.MemoryMiB != DefaultMemoryMiB || s.Workspace != "" || s.ReadOnly || len(s.Allow) != 0 {
		t.Fatalf("defaults = %+v", s)
	}
	if err := s.Validate(Validators{}); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
}

func TestImageSettings(t *testing.T) {
	s, err := Load(writeFile(t, `{"image": "standard", "keep_disk": true}`), Validators{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Image != "standard" || !s.KeepDisk {
		t.Fatalf("got %+v", s)
	}
}

func TestPartialFileKeepsDefaults(t *testing.T) {
	s, err := Load(writeFile(t, `{"cpus": 4, "allow": null}`), Validators{})
	if err != nil {
		t.Fatal(err)
	}
	if s.CPUs != 4 || s.MemoryMiB != DefaultMemoryMiB || s.Allow == nil {
		t.Fatalf("got %+v", s)
	}
}

// TestLoadErrors: each bad file is refused with the file name and the field.
func TestLoadErrors(t *testing.T) {
	cases := []struct {
		name, content, want string
	}{
		{"cpus zero", `{"cpus": 0}`, `settings.json: "cpus": 0 is not between 1 and 64`},
		{"cpus too many", `{"cpus": 65}`, `settings.json: "cpus": 65 is not between 1 and 64`},
		{"cpus not a number", `{"cpus": "2"}`, `settings.json: "cpus": want a whole number, got "2"`},
		{"cpus fraction", `{"cpus": 1.5}`, `settings.json: "cpus": want a whole number, got 1.5`},
		{"memory small", `{"memory_mib": 255}`, `settings.json: "memory_mib": 255 is not between 256 and 1048576`},
		{"memory huge", `{"memory_mib": 2000000}`, `settings.json: "memory_mib": 2000000 is not between 256 and 1048576`},
		{"read_only type", `{"read_only": "yes"}`, `settings.json: "read_only": want true or false, got "yes"`},
		{"workspace relative", `{"workspace": "proj"}`, `settings.json: "workspace": "proj" is not an absolute path`},
		{"workspace type", `{"workspace": 7}`, `settings.json: "workspace": want a string, got 7`},
		{"allow type", `{"allow": "example.com"}`, `settings.json: "allow": want a list of strings, got "example.com"`},
		{"tool_config_writable relative", `{"tool_config_writable": ["/a", "b"]}`, `settings.json: "tool_config_writable"[1]: "b" is not an absolute path`},
		{"image unknown", `{"image": "fedora"}`, `settings.json: "image": "fedora" is not an image: choose minimal or standard`},
		{"keep_disk without a disk", `{"keep_disk": true}`, `settings.json: "keep_disk": only the "standard" image has a disk to keep`},
		{"negative task log bound", `{"task_log_max_mib": -1}`, `settings.json: "task_log_max_mib": -1 is not between 0 (the default) and 1048576 MiB`},
		{"huge quota", `{"workspace_quota_mib": 2000000}`, `settings.json: "workspace_quota_mib": 2000000 is not between 0 (the default) and 1048576 MiB`},
		{"allow empty entry", `{"allow": ["a.com", " "]}`, `settings.json: "allow"[1]: empty entry`},
		{"deny entry type", `{"deny": [1]}`, `settings.json: "deny": want a string, got [1]`},
		{"deny empty entry", `{"deny": [""]}`, `settings.json: "deny"[0]: empty entry`},
		{"map_hosts shape", `{"map_hosts": ["a.com"]}`, `settings.json: "map_hosts"[0]: "a.com" is not NAME=ADDR`},
		{"map_hosts empty addr", `{"map_hosts": ["a.com="]}`, `settings.json: "map_hosts"[0]: "a.com=" is not NAME=ADDR`},
		{"unknown field", `{"cpus": 2, "proxy": "x", "Cpus": 3}`, `settings.json: unknown field "Cpus", "proxy"; known fields are allow, changes, cpus, deny, egress_log_max_mib, image, inspect, keep_disk, map_hosts, memory_mib, read_only, secrets, task_log_max_mib, tool_config_writable, upstream_cas, upstream_proxy, workspace, workspace_quota_mib`},
		{"syntax", "{\n  \"cpus\": 2,\n}", `settings.json: line 3, column 1: invalid character '}' looking for beginning of object key string`},
		{"empty", ``, `settings.json: empty file`},
		{"not an object", `[1]`, `settings.json: not a JSON object`},
		{"null", `null`, `settings.json: not a JSON object`},
		{"two values", `{} {}`, `settings.json: more than one JSON value`},
		{"several", `{"cpus": 0, "memory_mib": 1}`, "settings.json: \"cpus\": 0 is not between 1 and 64\nsettings.json: \"memory_mib\": 1 is not between 256 and 1048576"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(writeFile(t, tc.content), Validators{})
			if err == nil || err.Error() != tc.want {
				t.Fatalf("error:\n%v\nwant:\n%s", err, tc.want)
			}
		})
	}
}

func TestListLimit(t *testing.T) {
	s := Default()
	s.Deny = make([]string, MaxEntries+1)
	err := s.Validate(Validators{})
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "deny" || !strings.Contains(err.Error(), "at most") {
		t.Fatalf("err = %v", err)
	}
}

// TestValidators: injected checks run on the right fields and their errors
// come back wrapped in a FieldError naming field and index.
func TestValidators(t *testing.T) {
	errBad := errors.New("bad entry")
	var seen []string
	check := func(field string) func(string) error {
		return func(e string) error {
			seen = append(seen, field+":"+e)
			if strings.HasPrefix(e, "bad") {
				return errBad
			}
			return nil
		}
	}
	v := Validators{
		Workspace: func(dir string) (string, error) {
			seen = append(seen, "workspace:"+dir)
			return "", errors.New("folder cannot be shared: it is your home folder")
		},
		Allow: check("allow"), Deny: check("deny"), MapHost: check("map"),
	}
	s := Default()
	s.Workspace = "/home/me"
	s.Allow = []string{"ok.com", "bad.com"}
	s.Deny = []string{"bad"}
	s.MapHosts = []string{"bad=1.2.3.4", "noequals"}
	err := s.Validate(v)
	want := strings.Join([]string{
		`"workspace": folder cannot be shared: it is your home folder`,
		`"allow"[1]: bad entry`,
		`"deny"[0]: bad entry`,
		`"map_hosts"[0]: bad entry`,
		`"map_hosts"[1]: "noequals" is not NAME=ADDR`,
	}, "\n")
	if err == nil || err.Error() != want || !errors.Is(err, errBad) {
		t.Fatalf("error:\n%v\nwant:\n%s", err, want)
	}
	if got := strings.Join(seen, " "); got != "workspace:/home/me allow:ok.com allow:bad.com deny:bad map:bad=1.2.3.4" {
		t.Fatalf("validators saw %s", got)
	}
	if err := Save(filepath.Join(t.TempDir(), FileName), s, v); err == nil || !strings.HasPrefix(err.Error(), "settings.json: ") {
		t.Fatalf("Save of invalid settings = %v", err)
	}
}

func full() Settings {
	return Settings{
		Workspace: "/home/me/project", CPUs: 4, MemoryMiB: 4096, ReadOnly: true,
		Allow:    []string{"github.com", "*.githubusercontent.com", "10.1.2.0/24:443"},
		Deny:     []string{"gist.github.com"},
		MapHosts: []string{"registry.local=10.1.2.3"},
	}
}

func TestGolden(t *testing.T) {
	for name, s := range map[string]Settings{"full.json": full(), "default.json": Default()} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "airlock", FileName)
			if err := Save(path, s, Validators{}); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", name)
			if update {
				os.WriteFile(golden, got, 0o644)
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("saved:\n%s\nwant (UPDATE_GOLDEN=1 rewrites):\n%s", got, want)
			}
			back, err := Load(golden, Validators{})
			if err != nil {
				t.Fatal(err)
			}
			if again, _ := Encode(back); !bytes.Equal(again, want) {
				t.Fatalf("round trip changed the file:\n%s", again)
			}
		})
	}
}

func TestSaveIsAtomicAndPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "airlock")
	path := filepath.Join(dir, FileName)
	if err := Save(path, Default(), Validators{}); err != nil {
		t.Fatal(err)
	}
	if err := Save(path, full(), Validators{}); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{dir: 0o700, path: 0o600} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v, want %v (%v)", p, fi.Mode().Perm(), want, err)
		}
	}
	if s, err := Load(path, Validators{}); err != nil || s.CPUs != 4 {
		t.Fatalf("Load = %+v, %v", s, err)
	}
	// A rename that fails (path is now a non-empty folder) leaves no
	// temporary file behind.
	blocked := filepath.Join(dir, "blocked.json")
	os.MkdirAll(filepath.Join(blocked, "x"), 0o700)
	if err := Save(blocked, full(), Validators{}); err == nil {
		t.Fatal("Save over a folder succeeded")
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Fatalf("folder holds %d entries, want settings.json and blocked.json", len(entries))
	}
}

func TestDefaultPath(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", "/cfg")
	t.Setenv("HOME", "/home/me")
	p, err := DefaultPath()
	if err != nil || p != "/cfg/airlock/settings.json" {
		t.Fatalf("DefaultPath = %q, %v", p, err)
	}
}

func TestValidateSecretsAndUpstream(t *testing.T) {
	s := Default()
	s.Secrets = []Secret{{Name: "A", Hosts: []string{"a.com"}, Source: "keychain", Placeholder: "p"}, {Name: "A"}, {}}
	s.UpstreamCAs = []string{"relative.pem"}
	s.UpstreamProxy = "socks5://x"
	checked := 0
	err := s.Validate(Validators{
		Secret:        func(Secret) error { checked++; return nil },
		UpstreamProxy: func(string) error { return errors.New("want http://") },
	})
	for _, want := range []string{`"secrets"[1]: A appears twice`, `"secrets"[2]: no name`, `"upstream_cas"[0]`, `"upstream_proxy": want http://`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in %v", want, err)
		}
	}
	if checked != 1 {
		t.Errorf("secret validator ran %d times", checked)
	}
	// A secret with an unknown field (say, a value) is refused on load.
	if _, err := Decode([]byte(`{"secrets": [{"name": "A", "value": "x"}]}`)); err == nil || !strings.Contains(err.Error(), "value") {
		t.Errorf("unknown secret field accepted: %v", err)
	}
}

func TestDiskBoundsSettings(t *testing.T) {
	s, err := Load(writeFile(t, `{"egress_log_max_mib": 8, "task_log_max_mib": 64, "workspace_quota_mib": 2048}`), Validators{})
	if err != nil {
		t.Fatal(err)
	}
	if s.EgressLogMaxMiB != 8 || s.TaskLogMaxMiB != 64 || s.WorkspaceQuotaMiB != 2048 {
		t.Fatalf("got %+v", s.DiskBounds)
	}
	data, err := Encode(s)
	if err != nil || !strings.Contains(string(data), `"workspace_quota_mib": 2048`) {
		t.Fatalf("Encode: %v\n%s", err, data)
	}
	if data, _ := Encode(Default()); strings.Contains(string(data), "_mib\": 0") {
		t.Errorf("zero bounds are written out:\n%s", data)
	}
}

// TestChangesMode: a workspace's mode comes from "changes", auto when it
// is not listed; a bad mode or a relative folder is refused by name.
func TestChangesMode(t *testing.T) {
	s, err := Load(writeFile(t, `{"changes": {"/home/u/a": "review", "/home/u/b": "direct"}}`), Validators{})
	if err != nil {
		t.Fatal(err)
	}
	for ws, want := range map[string]string{"/home/u/a": "review", "/home/u/b": "direct", "/home/u/c": "auto"} {
		if got := s.ChangesMode(ws); string(got) != want {
			t.Errorf("ChangesMode(%s) = %s, want %s", ws, got, want)
		}
	}
	s2 := s.WithChangesMode("/home/u/c", "review")
	if s.ChangesMode("/home/u/c") != "auto" || s2.ChangesMode("/home/u/c") != "review" || s2.ChangesMode("/home/u/a") != "review" {
		t.Errorf("WithChangesMode: %v then %v", s.Changes, s2.Changes)
	}
	for content, want := range map[string]string{
		`{"changes": {"/x": "sometimes"}}`: `"changes": /x: changes mode must be "direct", "review" or "auto", not "sometimes"`,
		`{"changes": {"/x": ""}}`:          `"changes": /x: changes mode must be`,
		`{"changes": {"x": "review"}}`:     `"changes": "x" is not an absolute path`,
		`{"changes": ["review"]}`:          `"changes": want`,
	} {
		_, err := Load(writeFile(t, content), Validators{})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want %q", content, err, want)
		}
	}
}
