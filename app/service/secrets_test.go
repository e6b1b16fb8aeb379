//go:build linux

package service

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/app/secrets"
)

func TestSecretsNeverShowTheirValue(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	const value = "sk-test-VALUE-that-must-not-leak"
	info, err := w.service.SetSecret(ctx, SecretRequest{Name: "API_TOKEN", Hosts: []string{"api.example.com"}, Header: "Authorization: Bearer {}", Value: value + "\n"})
	if err != nil {
		t.Fatal(err)
	}
	// No keychain in this world: kept in memory, and the user is told.
	if !info.Available || info.Source != secrets.SourceSession || !strings.Contains(info.Note, "memory") {
		t.Fatalf("info %+v", info)
	}
	again, err := w.service.SetSecret(ctx, SecretRequest{Name: "API_TOKEN", Hosts: []string{"api.example.com", "*.example.org"}, Value: value})
	if err != nil || again.Placeholder != info.Placeholder {
		t.Fatalf("replacing changed the placeholder: %v %q %q", err, again.Placeholder, info.Placeholder)
	}
	for name, req := range map[string]SecretRequest{
		"two sources":   {Name: "B", Hosts: []string{"a.com"}, Value: "x", FromEnv: "HOME"},
		"no source":     {Name: "B", Hosts: []string{"a.com"}},
		"missing env":   {Name: "B", Hosts: []string{"a.com"}, FromEnv: "AIRLOCK_TEST_UNSET_VAR"},
		"relative file": {Name: "B", Hosts: []string{"a.com"}, FromFile: "token.txt"},
		"no host":       {Name: "B", Value: "x"},
		"bad name":      {Name: "B-1", Hosts: []string{"a.com"}, Value: "x"},
	} {
		if _, err := w.service.SetSecret(ctx, req); !errors.Is(err, secrets.ErrInvalid) && !errors.Is(err, secrets.ErrNoValue) {
			t.Errorf("%s: %v", name, err)
		}
	}
	list, _ := w.service.Secrets(ctx)
	if len(list) != 1 || list[0].Name != "API_TOKEN" || len(list[0].Hosts) != 2 {
		t.Fatalf("list %+v", list)
	}
	task := w.run(RunRequest{Shell: `echo "tok=$API_TOKEN ssl=$SSL_CERT_FILE"`, Secrets: []string{"API_TOKEN"}})
	out, _ := w.output(task.ID)
	if !strings.Contains(out, "tok="+info.Placeholder+" ssl=/etc/ssl/certs/ca-certificates.crt") {
		t.Fatalf("task env: %q", out)
	}
	if _, err := w.service.Run(ctx, RunRequest{Shell: "true", Secrets: []string{"NOPE"}}); err == nil {
		t.Fatal("unknown secret accepted")
	}
	// The value is nowhere on disk: settings, task logs, egress log, CA.
	filepath.Walk(w.dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			if b, _ := os.ReadFile(p); strings.Contains(string(b), value) {
				t.Errorf("%s holds the value", p)
			}
		}
		return nil
	})
	if err := w.service.RemoveSecret(ctx, "API_TOKEN"); err != nil {
		t.Fatal(err)
	}
	if list, _ := w.service.Secrets(ctx); len(list) != 0 {
		t.Fatalf("after remove: %+v", list)
	}
	if err := w.service.RemoveSecret(ctx, "API_TOKEN"); !errors.Is(err, secrets.ErrInvalid) {
		t.Fatalf("second remove: %v", err)
	}
}

// A value kept only in memory is gone after a restart: a task given that
// secret is refused, saying how to set it again, instead of running with
// the placeholder where the value belongs.
func TestSecretInMemoryRefusedAfterRestart(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	info, err := w.service.SetSecret(ctx, SecretRequest{Name: "API_TOKEN", Hosts: []string{"api.example.com"}, Value: "v"})
	if err != nil || info.Source != secrets.SourceSession {
		t.Fatalf("set: %+v %v", info, err)
	}
	w.service.Close(ctx)
	w.open()
	_, err = w.service.Run(ctx, RunRequest{Shell: "true", Secrets: []string{"API_TOKEN", "API_TOKEN"}})
	if !errors.Is(err, secrets.ErrNoValue) {
		t.Fatalf("run with a secret whose value is gone: %v", err)
	}
	msg := err.Error()
	if !strings.Contains(msg, "airlock secret set API_TOKEN --host api.example.com") || strings.Contains(msg, info.Placeholder) ||
		strings.Count(msg, "API_TOKEN:") != 1 || strings.Contains(msg, "\n") {
		t.Fatalf("message %q: want one line saying how to set it again", msg)
	}
}
