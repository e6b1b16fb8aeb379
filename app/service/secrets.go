package service

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"

	"github.com/airlock-sandbox/airlock/app/secrets"
	"github.com/airlock-sandbox/airlock/app/settings"
)

// Secrets lists the secrets in the settings and whether their values can
// be read now. Values are never returned.
func (s *Service) Secrets(context.Context) ([]SecretInfo, error) {
	s.mu.Lock()
	list := slices.Clone(s.settings.Secrets)
	s.mu.Unlock()
	out := []SecretInfo{}
	for _, sec := range list {
		out = append(out, s.secretInfo(sec, ""))
	}
	return out, nil
}

func (s *Service) secretInfo(sec settings.Secret, note string) SecretInfo {
	info := SecretInfo{Secret: sec, Note: note}
	if _, err := s.vault.Value(sec); err != nil {
		info.Problem = err.Error()
	} else {
		info.Available = true
	}
	return info
}

// SetSecret adds or replaces a secret. A secret that already exists keeps
// its placeholder, so tasks already given it go on working. The value (or
// its source) is checked before anything is saved; the gate uses it at once.
func (s *Service) SetSecret(_ context.Context, req SecretRequest) (SecretInfo, error) {
	if err := secrets.CheckSpec(req.Name, req.Hosts, req.Header); err != nil {
		return SecretInfo{}, err
	}
	sources := 0
	for _, v := range []string{req.Value, req.FromEnv, req.FromFile} {
		if v != "" {
			sources++
		}
	}
	if sources != 1 {
		return SecretInfo{}, fmt.Errorf("%w: give the value, or --from-env VAR, or --from-file FILE (exactly one)", secrets.ErrInvalid)
	}
	s.mu.Lock()
	placeholder := ""
	for _, old := range s.settings.Secrets {
		if old.Name == req.Name {
			placeholder = old.Placeholder
		}
	}
	s.mu.Unlock()
	if placeholder == "" {
		placeholder = secrets.NewPlaceholder(req.Name)
	}
	sec := settings.Secret{Name: req.Name, Hosts: req.Hosts, Header: req.Header, Placeholder: placeholder, Source: secrets.SourceKeychain}
	switch {
	case req.FromEnv != "":
		sec.Source = secrets.PrefixEnv + req.FromEnv
	case req.FromFile != "":
		if !filepath.IsAbs(req.FromFile) {
			return SecretInfo{}, fmt.Errorf("%w: --from-file %q: give an absolute path", secrets.ErrInvalid, req.FromFile)
		}
		sec.Source = secrets.PrefixFile + req.FromFile
	}
	if err := secrets.Validate(sec); err != nil {
		return SecretInfo{}, err
	}
	note := ""
	if req.Value != "" {
		src, n, err := s.vault.Put(req.Name, []byte(req.Value))
		if err != nil {
			return SecretInfo{}, fmt.Errorf("secret %s: %w", req.Name, err)
		}
		sec.Source, note = src, n
	} else if _, err := s.vault.Value(sec); err != nil {
		return SecretInfo{}, fmt.Errorf("%w (the Airlock service reads it, not this shell: pipe the value on stdin instead)", err)
	}
	err := s.updateSettings(func(st *settings.Settings) error {
		st.Secrets = slices.DeleteFunc(st.Secrets, func(x settings.Secret) bool { return x.Name == sec.Name })
		st.Secrets = append(st.Secrets, sec)
		return s.refreshSecrets(st.Secrets)
	})
	if err != nil {
		return SecretInfo{}, err
	}
	s.log.Info("secret set", "name", sec.Name, "hosts", sec.Hosts, "source", sec.Source)
	return s.secretInfo(sec, note), nil
}

// RemoveSecret forgets a secret: its metadata, the value Airlock kept (the
// keychain item, or memory), and the gate stops adding it at once.
func (s *Service) RemoveSecret(_ context.Context, name string) error {
	var gone settings.Secret
	err := s.updateSettings(func(st *settings.Settings) error {
		i := slices.IndexFunc(st.Secrets, func(x settings.Secret) bool { return x.Name == name })
		if i < 0 {
			return fmt.Errorf("%w: no secret named %q", secrets.ErrInvalid, name)
		}
		gone = st.Secrets[i]
		st.Secrets = slices.Delete(st.Secrets, i, i+1)
		return s.refreshSecrets(st.Secrets)
	})
	if err != nil {
		return err
	}
	s.log.Info("secret removed", "name", name)
	return s.vault.Forget(gone)
}

// refreshSecrets gives the gate the values of list. A secret whose value
// cannot be read is left out (its placeholder then goes out unchanged: it
// is no secret) and logged by name.
func (s *Service) refreshSecrets(list []settings.Secret) error {
	values, err := s.vault.ForGate(list)
	if err != nil {
		s.log.Warn("some secrets are not available", "err", err)
	}
	if err := s.gate.SetSecrets(values); err != nil {
		return errors.Join(secrets.ErrInvalid, err)
	}
	return nil
}
