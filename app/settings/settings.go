// Package settings holds the user's Airlock settings: the workspace folder,
// the VM's size, read-only sharing, and the egress allow, deny and
// map-host lists. They live in one JSON file in the OS config folder
// (DefaultPath), are validated field by field on load with errors that name
// the field, and are written atomically.
//
// Entry grammars belong to their owners: Validate takes Validators, so the
// caller plugs in the egress policy parser and the workspace check without
// this package importing either.
package settings

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/app/changes"
)

// Settings is the content of settings.json.
type Settings struct {
	// Workspace is the folder shared with the guest; empty until chosen.
	Workspace string `json:"workspace"`
	// CPUs is the number of virtual CPUs.
	CPUs int `json:"cpus"`
	// MemoryMiB is the guest's memory.
	MemoryMiB int `json:"memory_mib"`
	// ReadOnly shares the workspace read-only.
	ReadOnly bool `json:"read_only"`
	// Allow lists the hosts the guest may reach (the grammar of app/egress/policy.ParseEntry).
	Allow []string `json:"allow"`
	// Deny lists hosts refused even when allowed; deny wins.
	Deny []string `json:"deny"`
	// MapHosts pins names to addresses, NAME=ADDR.
	MapHosts []string `json:"map_hosts"`
	// Secrets describe credentials the gate adds on the way out: where
	// each may go and where its value comes from, never the value.
	Secrets []Secret `json:"secrets"`
	// UpstreamCAs are PEM files of extra CAs the gate trusts when it
	// verifies real servers (a corporate TLS proxy, a private CA).
	UpstreamCAs []string `json:"upstream_cas"`
	// UpstreamProxy, if set, is an HTTP proxy (http://host:port) every
	// outbound connection goes through.
	UpstreamProxy string `json:"upstream_proxy"`
	// Inspect terminates TLS for every host, not only those with a
	// secret, so placeholders are caught everywhere.
	Inspect bool `json:"inspect"`
	// Image is the guest image: "minimal" (also when empty) or "standard".
	Image string `json:"image,omitempty"`
	// KeepDisk keeps the standard image's changes outside the workspace on
	// a persistent disk per workspace instead of starting clean each boot.
	KeepDisk bool `json:"keep_disk,omitempty"`
	// ToolConfigWritable lists the workspaces (absolute paths) in which
	// tasks may change what the user's tools run on the host: .git/config,
	// .git/hooks, .envrc, .vscode, .idea. Elsewhere they are read-only to
	// tasks.
	ToolConfigWritable []string `json:"tool_config_writable,omitempty"`
	// Changes maps workspaces (absolute paths) to how they take the
	// guest's writes: "direct", "review" or "auto" (changes.Mode). A
	// workspace not listed is in auto mode. ReadOnly wins over any mode:
	// a read-only share has no changes to hold.
	Changes map[string]changes.Mode `json:"changes,omitempty"`
	// Bounds on what the guest can make Airlock write to the host's disk;
	// see DiskBounds.
	DiskBounds
}

// DiskBounds bound the host disk the guest can fill. Zero means the default.
type DiskBounds struct {
	// EgressLogMaxMiB is the size at which the egress decision log is
	// rotated (two old files are kept); 0 means 32.
	EgressLogMaxMiB int `json:"egress_log_max_mib,omitempty"`
	// TaskLogMaxMiB bounds one task's output log; past it the output is
	// discarded and the task marked truncated. 0 means 256.
	TaskLogMaxMiB int `json:"task_log_max_mib,omitempty"`
	// WorkspaceQuotaMiB, when set, stops the running tasks and refuses
	// new ones while the workspace folder holds more than this; 0 is off.
	WorkspaceQuotaMiB int `json:"workspace_quota_mib,omitempty"`
}

// Secret is the metadata of one credential. The value lives in the OS
// keychain, an environment variable or a file that Source names; it is
// never written here.
type Secret struct {
	// Name is what the task's environment variable is called.
	Name string `json:"name"`
	// Hosts the value may be sent to (egress entry grammar).
	Hosts []string `json:"hosts"`
	// Header, if set, is a template such as "Authorization: Bearer {}".
	Header string `json:"header,omitempty"`
	// Source says where the value is: "keychain", "env:VAR" or
	// "file:PATH" (see app/secrets).
	Source string `json:"source"`
	// Placeholder is what the guest gets instead of the value.
	Placeholder string `json:"placeholder"`
}

// Images are the values Image may take ("" too, meaning the first).
var Images = []string{"minimal", "standard"}

// Bounds and defaults. The defaults match app/sandbox's.
const (
	DefaultCPUs      = 2
	DefaultMemoryMiB = 1024
	MinCPUs          = 1
	MaxCPUs          = 64
	MinMemoryMiB     = 256
	MaxMemoryMiB     = 1 << 20
	// MaxEntries bounds each list, so a damaged file cannot make the gate
	// scan millions of rules.
	MaxEntries = 10000
	// MaxDiskMiB bounds the DiskBounds fields (1 TiB).
	MaxDiskMiB = 1 << 20
)

// Default returns the settings used when there is no file: no workspace,
// the default VM size, read-write, and empty lists (deny all egress).
func Default() Settings {
	return Settings{CPUs: DefaultCPUs, MemoryMiB: DefaultMemoryMiB, Allow: []string{}, Deny: []string{}, MapHosts: []string{},
		Secrets: []Secret{}, UpstreamCAs: []string{}}
}

// Validators check entries whose grammar another package owns. A nil
// function skips that check (the structural checks of Validate still run).
type Validators struct {
	// Workspace checks the folder and returns its canonical form; app
	// passes workspace.Host.Validate.
	Workspace func(dir string) (string, error)
	// Allow, Deny and MapHost check one list entry each; app passes the
	// egress policy parser (policy.ParseEntry, policy.ParseMapHost).
	Allow, Deny, MapHost func(entry string) error
	// Secret checks one secret's metadata; app passes secrets.Validate.
	Secret func(Secret) error
	// UpstreamProxy checks the upstream proxy URL.
	UpstreamProxy func(string) error
}

// FieldError is one invalid field, or one invalid entry of a list field.
type FieldError struct {
	// Field is the JSON name of the field.
	Field string
	// Index is the entry's position in a list field, or -1.
	Index int
	// Err says what is wrong.
	Err error
}

// Error returns `"cpus": REASON` or `"allow"[2]: REASON`.
func (e *FieldError) Error() string {
	if e.Index >= 0 {
		return fmt.Sprintf("%q[%d]: %v", e.Field, e.Index, e.Err)
	}
	return fmt.Sprintf("%q: %v", e.Field, e.Err)
}

// Unwrap returns the reason, so errors.Is sees a validator's sentinel.
func (e *FieldError) Unwrap() error { return e.Err }

// Validate checks every field and returns all problems joined, each a
// *FieldError naming its field.
func (s Settings) Validate(v Validators) error {
	var errs []error
	bad := func(field string, index int, err error) {
		errs = append(errs, &FieldError{Field: field, Index: index, Err: err})
	}
	if s.Workspace != "" {
		if !filepath.IsAbs(s.Workspace) {
			bad("workspace", -1, fmt.Errorf("%q is not an absolute path", s.Workspace))
		} else if v.Workspace != nil {
			if _, err := v.Workspace(s.Workspace); err != nil {
				bad("workspace", -1, err)
			}
		}
	}
	if s.CPUs < MinCPUs || s.CPUs > MaxCPUs {
		bad("cpus", -1, fmt.Errorf("%d is not between %d and %d", s.CPUs, MinCPUs, MaxCPUs))
	}
	if s.MemoryMiB < MinMemoryMiB || s.MemoryMiB > MaxMemoryMiB {
		bad("memory_mib", -1, fmt.Errorf("%d is not between %d and %d", s.MemoryMiB, MinMemoryMiB, MaxMemoryMiB))
	}
	if s.Image != "" && !slices.Contains(Images, s.Image) {
		bad("image", -1, fmt.Errorf("%q is not an image: choose %s", s.Image, strings.Join(Images, " or ")))
	}
	if len(s.ToolConfigWritable) > MaxEntries {
		bad("tool_config_writable", -1, fmt.Errorf("%d entries, at most %d are allowed", len(s.ToolConfigWritable), MaxEntries))
	} else {
		for i, dir := range s.ToolConfigWritable {
			if !filepath.IsAbs(dir) {
				bad("tool_config_writable", i, fmt.Errorf("%q is not an absolute path", dir))
			}
		}
	}
	if len(s.Changes) > MaxEntries {
		bad("changes", -1, fmt.Errorf("%d entries, at most %d are allowed", len(s.Changes), MaxEntries))
	} else {
		dirs := make([]string, 0, len(s.Changes))
		for dir := range s.Changes {
			dirs = append(dirs, dir)
		}
		slices.Sort(dirs) // one order for the messages
		for _, dir := range dirs {
			if !filepath.IsAbs(dir) {
				bad("changes", -1, fmt.Errorf("%q is not an absolute path", dir))
			} else if _, err := changes.ParseMode(string(s.Changes[dir])); err != nil || s.Changes[dir] == "" {
				if err == nil {
					err = errors.New(`changes mode must be "direct", "review" or "auto", not ""`)
				}
				bad("changes", -1, fmt.Errorf("%s: %w", dir, err))
			}
		}
	}
	if s.KeepDisk && s.Image != "standard" {
		bad("keep_disk", -1, errors.New(`only the "standard" image has a disk to keep`))
	}
	for _, f := range []struct {
		field string
		v     int
	}{
		{"egress_log_max_mib", s.EgressLogMaxMiB}, {"task_log_max_mib", s.TaskLogMaxMiB}, {"workspace_quota_mib", s.WorkspaceQuotaMiB},
	} {
		if f.v < 0 || f.v > MaxDiskMiB {
			bad(f.field, -1, fmt.Errorf("%d is not between 0 (the default) and %d MiB", f.v, MaxDiskMiB))
		}
	}
	lists := []struct {
		field   string
		entries []string
		check   func(string) error
	}{
		{"allow", s.Allow, v.Allow},
		{"deny", s.Deny, v.Deny},
		{"map_hosts", s.MapHosts, mapHostShape(v.MapHost)},
	}
	for _, l := range lists {
		if len(l.entries) > MaxEntries {
			bad(l.field, -1, fmt.Errorf("%d entries, at most %d are allowed", len(l.entries), MaxEntries))
			continue
		}
		for i, e := range l.entries {
			if strings.TrimSpace(e) == "" {
				bad(l.field, i, errors.New("empty entry"))
			} else if l.check != nil {
				if err := l.check(e); err != nil {
					bad(l.field, i, err)
				}
			}
		}
	}
	if len(s.Secrets) > MaxEntries {
		bad("secrets", -1, fmt.Errorf("%d entries, at most %d are allowed", len(s.Secrets), MaxEntries))
	} else {
		names := map[string]bool{}
		for i, sec := range s.Secrets {
			switch {
			case sec.Name == "":
				bad("secrets", i, errors.New("no name"))
			case names[sec.Name]:
				bad("secrets", i, fmt.Errorf("%s appears twice", sec.Name))
			case v.Secret != nil:
				if err := v.Secret(sec); err != nil {
					bad("secrets", i, err)
				}
			}
			names[sec.Name] = true
		}
	}
	for i, f := range s.UpstreamCAs {
		if !filepath.IsAbs(f) {
			bad("upstream_cas", i, fmt.Errorf("%q is not an absolute path", f))
		}
	}
	if s.UpstreamProxy != "" && v.UpstreamProxy != nil {
		if err := v.UpstreamProxy(s.UpstreamProxy); err != nil {
			bad("upstream_proxy", -1, err)
		}
	}
	return errors.Join(errs...)
}

// ChangesMode is how workspace ws takes the guest's writes: its entry in
// Changes, else Auto (the default for a new workspace).
func (s Settings) ChangesMode(ws string) changes.Mode {
	if m, ok := s.Changes[ws]; ok && m != "" {
		return m
	}
	return changes.Auto
}

// WithChangesMode returns a copy of s whose Changes sets ws to mode; the
// map is copied, so s's own is never changed.
func (s Settings) WithChangesMode(ws string, mode changes.Mode) Settings {
	m := make(map[string]changes.Mode, len(s.Changes)+1)
	maps.Copy(m, s.Changes)
	m[ws] = mode
	s.Changes = m
	return s
}

// mapHostShape checks NAME=ADDR even without the egress parser, then runs it.
func mapHostShape(parse func(string) error) func(string) error {
	return func(e string) error {
		name, addr, ok := strings.Cut(e, "=")
		if !ok || strings.TrimSpace(name) == "" || strings.TrimSpace(addr) == "" {
			return fmt.Errorf("%q is not NAME=ADDR", e)
		}
		if parse != nil {
			return parse(e)
		}
		return nil
	}
}
