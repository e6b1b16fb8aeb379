package builder

import (
	"strings"
	"testing"
)

// Two self-signed test certificates (not real CAs; only their PEM framing
// matters to the builder).
const (
	certA = "-----BEGIN CERTIFICATE-----\nMIIBRjCB7aADAgECAgEBMAoGCCqGSM49BAMCMBAxDjAMBgNVBAMTBUNBIEFBMB4X\n-----END CERTIFICATE-----\n"
	certB = "-----BEGIN CERTIFICATE-----\nMIIBRjCB7aADAgECAgECMAoGCCqGSM49BAMCMBAxDjAMBgNVBAMTBUNBIEJCMB4X\n-----END CERTIFICATE-----" // no final newline
)

func caFixture(t *testing.T) string {
	root := t.TempDir()
	// Written out of order: the bundle must be sorted anyway.
	writeFixture(t, root, "usr/share/ca-certificates/mozilla/Zeta_Root.crt", certB)
	writeFixture(t, root, "usr/share/ca-certificates/mozilla/Alpha_Root.crt", certA)
	writeFixture(t, root, "usr/share/ca-certificates/mozilla/README", "not a certificate")
	writeFixture(t, root, "usr/share/doc/ca-certificates/copyright", "ignored")
	return root
}

func TestCAEntriesAllByDefault(t *testing.T) {
	root := caFixture(t)
	entries, n, err := caEntries(root)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("count = %d, want 2", n)
	}
	byName := map[string]cpioEntry{}
	var names []string
	for _, e := range entries {
		byName[e.Name] = e
		names = append(names, e.Name)
	}
	want := []string{
		"usr/share/ca-certificates/mozilla/Alpha_Root.crt",
		"usr/share/ca-certificates/mozilla/Zeta_Root.crt",
		"etc/ssl/certs/ca-certificates.crt",
	}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Errorf("entries = %q, want %q", names, want)
	}
	bundle := byName["etc/ssl/certs/ca-certificates.crt"]
	if got := string(bundle.Data); got != certA+certB+"\n" {
		t.Errorf("bundle = %q, want A then B, newline-terminated", got)
	}
	if bundle.Mode != modeFile|0o644 {
		t.Errorf("bundle mode %o", bundle.Mode)
	}
	if e := byName["usr/share/ca-certificates/mozilla/Alpha_Root.crt"]; e.Source == "" || e.Mode != modeFile|0o644 {
		t.Errorf("certificate entry = %+v", e)
	}
}

func TestCAEntriesHonourConf(t *testing.T) {
	root := caFixture(t)
	writeFixture(t, root, "etc/ca-certificates.conf",
		"# comment\n\nmozilla/Zeta_Root.crt\n!mozilla/Alpha_Root.crt\nmozilla/Gone.crt\n")
	entries, n, err := caEntries(root)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 || len(entries) != 2 {
		t.Fatalf("count %d, %d entries; want only Zeta and the bundle", n, len(entries))
	}
	if entries[0].Name != "usr/share/ca-certificates/mozilla/Zeta_Root.crt" || string(entries[1].Data) != certB+"\n" {
		t.Errorf("entries = %+v", entries)
	}
}

func TestCAEntriesErrors(t *testing.T) {
	if _, _, err := caEntries(t.TempDir()); err == nil {
		t.Error("no certificate folder: no error")
	}
	root := t.TempDir()
	writeFixture(t, root, "usr/share/ca-certificates/mozilla/Bad.crt", "garbage\n")
	if _, _, err := caEntries(root); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Errorf("garbage certificate: %v", err)
	}
	root = caFixture(t)
	writeFixture(t, root, "etc/ca-certificates.conf", "!mozilla/Alpha_Root.crt\n!mozilla/Zeta_Root.crt\n")
	if _, _, err := caEntries(root); err == nil || !strings.Contains(err.Error(), "no certificates") {
		t.Errorf("everything disabled: %v", err)
	}
}
