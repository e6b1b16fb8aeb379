package settings

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/atomicfile"
)

// FileName is the settings file's name inside the Airlock config folder.
const FileName = "settings.json"

// DefaultPath returns os.UserConfigDir()/airlock/settings.json.
func DefaultPath() (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("settings: find config folder: %w", err)
	}
	return filepath.Join(dir, "airlock", FileName), nil
}

// Load reads and validates the settings at path. A missing file yields
// Default() and no error. Fields absent from the file keep their defaults;
// unknown fields are refused. Every error starts with the file's name and
// names the field: `settings.json: "cpus": 0 is not between 1 and 64`.
func Load(path string, v Validators) (Settings, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Default(), nil
	}
	if err != nil {
		return Settings{}, fmt.Errorf("settings: load: %w", err)
	}
	s, err := Decode(data)
	if err == nil {
		err = s.Validate(v)
	}
	if err != nil {
		return Settings{}, inFile(path, err)
	}
	return s, nil
}

// Save validates s and writes it to path atomically: a temporary file in
// the same folder (0600), fsync, rename over path, fsync of the folder. The
// folder is created 0700 if missing. A reader sees the old settings or the
// new ones, even if the machine stops midway.
func Save(path string, s Settings, v Validators) error {
	if err := s.Validate(v); err != nil {
		return inFile(path, err)
	}
	data, err := Encode(s)
	if err != nil {
		return fmt.Errorf("settings: save: %w", err)
	}
	if err := writeAtomic(path, data); err != nil {
		return fmt.Errorf("settings: save %s: %w", path, err)
	}
	return nil
}

// Encode returns s as the indented JSON Save writes, lists never null.
func Encode(s Settings) ([]byte, error) {
	for _, l := range []*[]string{&s.Allow, &s.Deny, &s.MapHosts, &s.UpstreamCAs} {
		if *l == nil {
			*l = []string{}
		}
	}
	if s.Secrets == nil {
		s.Secrets = []Secret{}
	}
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}

// fields maps each JSON name to the Settings field it fills. Names match
// exactly (encoding/json alone would also accept "CPUS").
var fields = map[string]func(*Settings) any{
	"workspace":            func(s *Settings) any { return &s.Workspace },
	"cpus":                 func(s *Settings) any { return &s.CPUs },
	"memory_mib":           func(s *Settings) any { return &s.MemoryMiB },
	"read_only":            func(s *Settings) any { return &s.ReadOnly },
	"allow":                func(s *Settings) any { return &s.Allow },
	"deny":                 func(s *Settings) any { return &s.Deny },
	"map_hosts":            func(s *Settings) any { return &s.MapHosts },
	"secrets":              func(s *Settings) any { return &s.Secrets },
	"upstream_cas":         func(s *Settings) any { return &s.UpstreamCAs },
	"upstream_proxy":       func(s *Settings) any { return &s.UpstreamProxy },
	"inspect":              func(s *Settings) any { return &s.Inspect },
	"image":                func(s *Settings) any { return &s.Image },
	"keep_disk":            func(s *Settings) any { return &s.KeepDisk },
	"tool_config_writable": func(s *Settings) any { return &s.ToolConfigWritable },
	"changes":              func(s *Settings) any { return &s.Changes },

	"egress_log_max_mib":  func(s *Settings) any { return &s.EgressLogMaxMiB },
	"task_log_max_mib":    func(s *Settings) any { return &s.TaskLogMaxMiB },
	"workspace_quota_mib": func(s *Settings) any { return &s.WorkspaceQuotaMiB },
}

// Decode parses settings JSON over Default(). It checks syntax and types,
// not values (see Validate). Errors name the field.
func Decode(data []byte) (Settings, error) {
	var raw map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&raw); err != nil {
		return Settings{}, syntaxError(data, err)
	}
	if raw == nil {
		return Settings{}, errors.New("not a JSON object")
	}
	if dec.More() {
		return Settings{}, errors.New("more than one JSON value")
	}
	var unknown []string
	for name := range raw {
		if fields[name] == nil {
			unknown = append(unknown, fmt.Sprintf("%q", name))
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return Settings{}, fmt.Errorf("unknown field %s; known fields are %s", strings.Join(unknown, ", "), knownFields())
	}
	s := Default()
	var errs []error
	for name, value := range raw {
		if string(value) == "null" {
			continue // keeps the default
		}
		fd := json.NewDecoder(bytes.NewReader(value))
		fd.DisallowUnknownFields() // inside secrets too
		if err := fd.Decode(fields[name](&s)); err != nil {
			errs = append(errs, &FieldError{Field: name, Index: -1, Err: typeError(value, err)})
		}
	}
	if len(errs) > 0 {
		sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
		return Settings{}, errors.Join(errs...)
	}
	return s, nil
}

func knownFields() string {
	names := make([]string, 0, len(fields))
	for n := range fields {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// typeError says what kind of value was wrong, without Go type names.
func typeError(value json.RawMessage, err error) error {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) {
		return err
	}
	want := map[string]string{"int": "a whole number", "string": "a string", "bool": "true or false", "[]string": "a list of strings"}[te.Type.String()]
	if want == "" {
		want = te.Type.String()
	}
	got := string(value)
	if len(got) > 40 {
		got = got[:40] + "…"
	}
	return fmt.Errorf("want %s, got %s", want, got)
}

// syntaxError adds the line and column of a JSON syntax error.
func syntaxError(data []byte, err error) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		before := data[:max(0, min(int(se.Offset), len(data))-1)] // Offset counts the bad byte
		line := bytes.Count(before, []byte("\n")) + 1
		col := len(before) - bytes.LastIndexByte(before, '\n')
		return fmt.Errorf("line %d, column %d: %v", line, col, se)
	}
	if errors.Is(err, io.EOF) {
		return errors.New("empty file")
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return errors.New("not a JSON object")
	}
	return err
}

// inFile prefixes every joined error with the file name, one per line.
func inFile(path string, err error) error {
	name := filepath.Base(path)
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	} else {
		errs = []error{err}
	}
	for i, e := range errs {
		errs[i] = fmt.Errorf("%s: %w", name, e)
	}
	return errors.Join(errs...)
}

// writeAtomic writes data next to path and renames it into place.
func writeAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	return atomicfile.Write(path, data, 0o600, atomicfile.Synced)
}
