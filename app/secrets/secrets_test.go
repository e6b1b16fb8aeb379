package secrets

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/app/settings"
)

// memKeychain is a keychain in a map; fail makes every call fail, as when
// no Secret Service answers.
type memKeychain struct {
	items map[string]string
	fail  bool
}

func (k *memKeychain) Get(n string) (string, error) {
	if k.fail {
		return "", errors.New("no keychain")
	}
	v, ok := k.items[n]
	if !ok {
		return "", errors.New("not found")
	}
	return v, nil
}

func (k *memKeychain) Set(n, v string) error {
	if k.fail {
		return errors.New("no keychain")
	}
	k.items[n] = v
	return nil
}

func (k *memKeychain) Delete(n string) error { delete(k.items, n); return nil }

func meta(name, source string) settings.Secret {
	return settings.Secret{Name: name, Hosts: []string{"api.example.com"}, Source: source, Placeholder: NewPlaceholder(name)}
}

func TestValidate(t *testing.T) {
	if err := Validate(meta("GITHUB_TOKEN", SourceKeychain)); err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]settings.Secret{
		"bad name":        meta("1-bad", SourceKeychain),
		"bad source":      meta("A", "vault:x"),
		"relative file":   meta("A", "file:token.txt"),
		"bad env name":    meta("A", "env:A-B"),
		"no hosts":        {Name: "A", Source: SourceKeychain, Placeholder: NewPlaceholder("A")},
		"bad host":        {Name: "A", Hosts: []string{"exa mple.com"}, Source: SourceKeychain, Placeholder: NewPlaceholder("A")},
		"bad header":      {Name: "A", Hosts: []string{"a.com"}, Header: "Authorization Bearer", Source: SourceKeychain, Placeholder: NewPlaceholder("A")},
		"short placehold": {Name: "A", Hosts: []string{"a.com"}, Source: SourceKeychain, Placeholder: "x"},
	} {
		if err := Validate(s); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if a, b := NewPlaceholder("X"), NewPlaceholder("X"); a == b || !strings.HasPrefix(a, "airlock_ph_x_") {
		t.Errorf("placeholders %q %q", a, b)
	}
}

func TestStoreSources(t *testing.T) {
	const value = "s3cr3t-VALUE"
	kc := &memKeychain{items: map[string]string{}}
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	os.WriteFile(file, []byte(value+"\n"), 0o600)
	st := NewStore(kc, func(k string) string { return map[string]string{"TOK": value}[k] })

	src, note, err := st.Put("K", []byte(value+"\n"))
	if err != nil || src != SourceKeychain || note != "" || kc.items["K"] != value {
		t.Fatalf("put: %q %q %v %v", src, note, err, kc.items)
	}
	for _, s := range []settings.Secret{meta("K", SourceKeychain), meta("E", "env:TOK"), meta("F", "file:"+file)} {
		v, err := st.Value(s)
		if err != nil || string(v) != value {
			t.Errorf("%s: %q %v", s.Source, v, err)
		}
	}
	if _, err := st.Value(meta("E", "env:MISSING")); !errors.Is(err, ErrNoValue) {
		t.Errorf("missing env: %v", err)
	}
	if err := st.Forget(meta("K", SourceKeychain)); err != nil || kc.items["K"] != "" {
		t.Fatalf("forget: %v", err)
	}

	// Without a working keychain the value stays in memory, with a note.
	kc.fail = true
	src, note, err = st.Put("M", []byte(value))
	if err != nil || src != SourceSession || !strings.Contains(note, "memory") {
		t.Fatalf("fallback: %q %q %v", src, note, err)
	}
	if v, err := st.Value(meta("M", SourceSession)); err != nil || string(v) != value {
		t.Fatalf("session value: %v", err)
	}
	if _, err := NewStore(nil, nil).Value(meta("M", SourceSession)); !errors.Is(err, ErrNoValue) {
		t.Fatalf("session value in another store: %v", err)
	}
	for _, bad := range []string{"", "\n", "a\nb", "a\rb", "a\x00b", strings.Repeat("x", MaxValue+1)} {
		if _, _, err := st.Put("B", []byte(bad)); !errors.Is(err, ErrInvalid) {
			t.Errorf("value %q accepted", bad[:min(len(bad), 8)])
		}
	}
	gs, err := st.ForGate([]settings.Secret{meta("E", "env:TOK"), meta("X", "env:MISSING")})
	if len(gs) != 1 || string(gs[0].Value) != value || err == nil || strings.Contains(err.Error(), value) {
		t.Fatalf("ForGate: %v %v", gs, err)
	}
	env, err := Env([]settings.Secret{meta("E", "env:TOK")}, []string{"E"})
	if err != nil || len(env) != 1 || !strings.HasPrefix(env[0], "E=airlock_ph_e_") {
		t.Fatalf("Env: %v %v", env, err)
	}
	if _, err := Env(nil, []string{"NOPE"}); err == nil {
		t.Fatal("unknown secret name accepted")
	}
}

// Store.Env refuses a secret it cannot read, once, saying how to provide
// it; secrets not asked for are not looked at.
func TestStoreEnvRefusesUnavailable(t *testing.T) {
	st := NewStore(nil, func(k string) string { return map[string]string{"TOK": "v"}[k] })
	list := []settings.Secret{meta("OK", "env:TOK"), meta("GONE", SourceSession), meta("OTHER", "env:MISSING")}
	if env, err := st.Env(list, []string{"OK"}); err != nil || len(env) != 1 {
		t.Fatalf("an available secret, beside unavailable ones not asked for: %v %v", env, err)
	}
	_, err := st.Env(list, []string{"OK", "GONE", "GONE"})
	if !errors.Is(err, ErrNoValue) {
		t.Fatalf("unavailable secret: %v", err)
	}
	msg := err.Error()
	if strings.Count(msg, "secret GONE:") != 1 || strings.Contains(msg, "OTHER") || !strings.Contains(msg, "airlock secret set GONE --host api.example.com") {
		t.Fatalf("message %q: want one error, for GONE only, saying how to set it", msg)
	}
}

// CheckSpec says what is wrong with what the user gave, and nothing about
// the placeholder Airlock derives from the name.
func TestCheckSpec(t *testing.T) {
	if err := CheckSpec("GITHUB_TOKEN", []string{"api.github.com"}, "Authorization: Bearer {}"); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]struct {
		name, header string
		hosts        []string
		want         string
	}{
		"no host":    {name: "A", want: "--host"},
		"bad name":   {name: "my.key", hosts: []string{"a.com"}, want: "name"},
		"bad header": {name: "A", hosts: []string{"a.com"}, header: "Authorization Bearer", want: "{}"},
	} {
		err := CheckSpec(c.name, c.hosts, c.header)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "placeholder") {
			t.Errorf("%s: %v", name, err)
		}
	}
}
