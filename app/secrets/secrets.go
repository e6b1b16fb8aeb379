// Package secrets keeps the values of the credentials the egress gate adds
// on the way out. The settings hold each secret's metadata (name, hosts,
// how it is sent, where its value is, its placeholder); the value itself
// comes from the OS keychain (Secret Service on Linux, the macOS Keychain,
// the Windows Credential Manager), an environment variable of the host
// process, or a file, and is read only into the host's memory. When no
// keychain is reachable, a value given directly is kept in memory for the
// life of the process ("session") rather than written anywhere.
package secrets

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"github.com/airlock-sandbox/airlock/app/egress/policy"

	"github.com/airlock-sandbox/airlock/app/egress/intercept"
	"github.com/airlock-sandbox/airlock/app/settings"
)

// Sources of a value, as written in settings.Secret.Source.
const (
	SourceKeychain = "keychain"
	SourceSession  = "session"
	PrefixEnv      = "env:"
	PrefixFile     = "file:"
)

// MaxValue bounds a secret's value.
const MaxValue = 64 << 10

// Errors; check with errors.Is.
var (
	// ErrInvalid marks metadata or a value that cannot be used.
	ErrInvalid = errors.New("invalid secret")
	// ErrNoValue means the source holds no value (any more).
	ErrNoValue = errors.New("secret value not available")
)

var nameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// Validate checks a secret's metadata: the name is an environment variable
// name, at least one host in the egress entry grammar, a header template
// with {} once, a known source, and a well-formed placeholder.
func Validate(s settings.Secret) error {
	errs := specErrors(s.Name, s.Hosts, s.Header)
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	switch {
	case s.Source == SourceKeychain, s.Source == SourceSession:
	case strings.HasPrefix(s.Source, PrefixEnv) && nameRE.MatchString(strings.TrimPrefix(s.Source, PrefixEnv)):
	case strings.HasPrefix(s.Source, PrefixFile) && filepath.IsAbs(strings.TrimPrefix(s.Source, PrefixFile)):
	default:
		bad("source %q: use keychain, env:VAR or file:/absolute/path", s.Source)
	}
	if len(s.Placeholder) < intercept.MinPlaceholder || strings.Trim(strings.ToLower(s.Placeholder), "abcdefghijklmnopqrstuvwxyz0123456789_-") != "" {
		bad("placeholder %q: at least %d letters, digits, _ or -", s.Placeholder, intercept.MinPlaceholder)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("secret %s: %w: %w", s.Name, ErrInvalid, err)
	}
	return nil
}

// CheckSpec checks what a user gives when setting a secret: the name, the
// hosts and the header template. It runs before the value is read, so a
// mistake is reported without asking for the value first; the source and
// placeholder Validate also checks are Airlock's own choices.
func CheckSpec(name string, hosts []string, header string) error {
	if err := errors.Join(specErrors(name, hosts, header)...); err != nil {
		return fmt.Errorf("secret %s: %w: %w", name, ErrInvalid, err)
	}
	return nil
}

func specErrors(name string, hosts []string, header string) []error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	if !nameRE.MatchString(name) {
		bad("name %q: use letters, digits and _ (an environment variable name, at most 64 characters)", name)
	}
	if len(hosts) == 0 {
		bad("no host: say where the secret may be sent (--host api.example.com)")
	}
	for _, h := range hosts {
		if _, err := policy.ParseEntry(h); err != nil {
			bad("host: %v", err)
		}
	}
	if header != "" {
		if _, _, _, err := intercept.ParseHeaderTemplate(header); err != nil {
			bad("%v", err)
		}
	}
	return errs
}

// NewPlaceholder returns a fresh placeholder for a secret: recognisable,
// unlikely to occur by chance, and unchanged by URL or header encoding.
func NewPlaceholder(name string) string {
	b := make([]byte, 12)
	rand.Read(b)
	return "airlock_ph_" + strings.ToLower(name) + "_" + hex.EncodeToString(b)
}

// CheckValue refuses values that are empty, too long, or hold line breaks
// or NUL (which would let a value forge headers). One trailing newline, as
// `echo` or a file adds, is removed first.
func CheckValue(v []byte) ([]byte, error) {
	v = []byte(strings.TrimSuffix(strings.TrimSuffix(string(v), "\n"), "\r"))
	switch {
	case len(v) == 0:
		return nil, fmt.Errorf("%w: the value is empty", ErrInvalid)
	case len(v) > MaxValue:
		return nil, fmt.Errorf("%w: the value is over %d KiB", ErrInvalid, MaxValue>>10)
	case strings.ContainsAny(string(v), "\r\n\x00"):
		return nil, fmt.Errorf("%w: the value holds a line break or NUL", ErrInvalid)
	}
	return v, nil
}

// Keychain is the OS credential store. OSKeychain is the real one.
type Keychain interface {
	Get(name string) (string, error)
	Set(name, value string) error
	Delete(name string) error
}

// Store reads and keeps values. Its methods are safe for concurrent use.
type Store struct {
	keychain Keychain
	getenv   func(string) string

	mu      sync.Mutex
	session map[string][]byte
}

// NewStore returns a store over a keychain (nil: none is available) and an
// environment (nil: os.Getenv).
func NewStore(k Keychain, getenv func(string) string) *Store {
	if getenv == nil {
		getenv = os.Getenv
	}
	return &Store{keychain: k, getenv: getenv, session: map[string][]byte{}}
}

// Put keeps a value given directly (stdin, the UI's password field) for
// secret name: in the keychain when it works, otherwise in memory only. It
// returns the source to record and, for memory, a note for the user.
func (st *Store) Put(name string, value []byte) (source, note string, err error) {
	v, err := CheckValue(value)
	if err != nil {
		return "", "", err
	}
	if st.keychain != nil {
		kerr := st.keychain.Set(name, string(v))
		if kerr == nil {
			st.mu.Lock()
			delete(st.session, name)
			st.mu.Unlock()
			return SourceKeychain, "", nil
		}
		note = fmt.Sprintf("the OS keychain is not available (%v), so the value is kept in memory until Airlock stops; use --from-env VAR or --from-file FILE to keep it across restarts", kerr)
	} else {
		note = "no OS keychain here, so the value is kept in memory until Airlock stops; use --from-env VAR or --from-file FILE to keep it across restarts"
	}
	st.mu.Lock()
	st.session[name] = v
	st.mu.Unlock()
	return SourceSession, note, nil
}

// Value reads a secret's value from its source.
func (st *Store) Value(s settings.Secret) ([]byte, error) {
	switch {
	case s.Source == SourceSession:
		st.mu.Lock()
		v, ok := st.session[s.Name]
		st.mu.Unlock()
		if !ok {
			return nil, fmt.Errorf("secret %s: %w: its value was kept in memory by an Airlock service that has stopped since; set it again (%s), or keep it across restarts with --from-env VAR or --from-file FILE", s.Name, ErrNoValue, setAgain(s))
		}
		return v, nil
	case s.Source == SourceKeychain:
		if st.keychain == nil {
			return nil, fmt.Errorf("secret %s: %w: it is kept in the OS keychain and none is reachable here; set it again with --from-env VAR or --from-file FILE (%s)", s.Name, ErrNoValue, setAgain(s))
		}
		v, err := st.keychain.Get(s.Name)
		if err != nil {
			return nil, fmt.Errorf("secret %s: %w: the OS keychain did not give its value (%v); set it again (%s)", s.Name, ErrNoValue, err, setAgain(s))
		}
		return CheckValue([]byte(v))
	case strings.HasPrefix(s.Source, PrefixEnv):
		name := strings.TrimPrefix(s.Source, PrefixEnv)
		v := st.getenv(name)
		if v == "" {
			return nil, fmt.Errorf("secret %s: %w: $%s is not set in the environment of the Airlock that reads it (the service, or this command for a run with a VM of its own); set it there and start that again", s.Name, ErrNoValue, name)
		}
		return CheckValue([]byte(v))
	case strings.HasPrefix(s.Source, PrefixFile):
		path := strings.TrimPrefix(s.Source, PrefixFile)
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("secret %s: %w: %v; put the value in that file, or set the secret again (%s)", s.Name, ErrNoValue, err, setAgain(s))
		}
		defer f.Close()
		b := make([]byte, MaxValue+3)
		n, _ := f.Read(b)
		v, err := CheckValue(b[:n])
		if err != nil {
			return nil, fmt.Errorf("secret %s from %s: %w", s.Name, path, err)
		}
		return v, nil
	}
	return nil, fmt.Errorf("secret %s: %w: unknown source %q", s.Name, ErrInvalid, s.Source)
}

// setAgain is the command that sets secret s again, value from stdin.
func setAgain(s settings.Secret) string {
	var b strings.Builder
	b.WriteString("airlock secret set " + s.Name)
	for _, h := range s.Hosts {
		b.WriteString(" --host " + h)
	}
	if s.Header != "" {
		b.WriteString(" --header '" + s.Header + "'")
	}
	return b.String()
}

// Forget removes a value Airlock keeps itself (keychain or memory); env and
// file sources belong to the user and are left alone.
func (st *Store) Forget(s settings.Secret) error {
	st.mu.Lock()
	delete(st.session, s.Name)
	st.mu.Unlock()
	if s.Source == SourceKeychain && st.keychain != nil {
		if err := st.keychain.Delete(s.Name); err != nil {
			return fmt.Errorf("secret %s: remove from the keychain: %w", s.Name, err)
		}
	}
	return nil
}

// ForGate reads the value of each secret for the egress gate. A secret
// whose value cannot be read is left out, and its error returned with the
// others (names only, never values).
func (st *Store) ForGate(list []settings.Secret) ([]intercept.Secret, error) {
	var out []intercept.Secret
	var errs []error
	for _, s := range list {
		v, err := st.Value(s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, intercept.Secret{Name: s.Name, Hosts: s.Hosts, Header: s.Header, Placeholder: s.Placeholder, Value: v})
	}
	return out, errors.Join(errs...)
}

// Env returns NAME=PLACEHOLDER for each named secret, for a task's
// environment. An unknown name is an error, and so is a secret whose value
// cannot be read now: the task would send its placeholder where the value
// belongs. Each such secret gets one error saying how to provide it;
// secrets not asked for are not looked at.
func (st *Store) Env(list []settings.Secret, names []string) ([]string, error) {
	env, err := Env(list, names)
	if err != nil {
		return nil, err
	}
	var errs []error
	seen := map[string]bool{}
	for _, n := range names {
		if seen[n] {
			continue
		}
		seen[n] = true
		for _, s := range list {
			if s.Name == n {
				if _, err := st.Value(s); err != nil {
					errs = append(errs, err)
				}
				break
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return env, nil
}

// Env returns NAME=PLACEHOLDER for each named secret, for a task's
// environment, without reading their values (Store.Env does). An unknown
// name is an error.
func Env(list []settings.Secret, names []string) ([]string, error) {
	var env []string
	for _, n := range names {
		found := false
		for _, s := range list {
			if s.Name == n {
				env = append(env, s.Name+"="+s.Placeholder)
				found = true
				break
			}
		}
		if !found {
			return nil, fmt.Errorf("%w: no secret named %q (airlock secret list shows them)", ErrInvalid, n)
		}
	}
	return env, nil
}
