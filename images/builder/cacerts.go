package builder

import (
	"bufio"
	"bytes"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// The CA bundle: Debian's ca-certificates package ships the certificates
// under /usr/share/ca-certificates, and its postinst (which never runs for
// an image) writes /etc/ca-certificates.conf and lets update-ca-certificates
// concatenate the enabled ones into the bundle. The builder does the same.
const (
	caPackage    = "ca-certificates"
	caCertsDir   = "usr/share/ca-certificates"
	caConfPath   = "etc/ca-certificates.conf"
	caBundlePath = "etc/ssl/certs/ca-certificates.crt"
)

// caEntries returns the initramfs members for the CA certificates found
// in root (an extracted ca-certificates package): every enabled
// certificate at its usual path under /usr/share/ca-certificates, and the
// bundle /etc/ssl/certs/ca-certificates.crt, their concatenation in sorted
// order, each ending in a newline (as update-ca-certificates writes it).
//
// Enabled means listed in root's /etc/ca-certificates.conf (lines without
// "!"), or, when the tree has no such file (the package does not ship one;
// its postinst generates it enabling everything), every *.crt file.
// It also returns the number of certificates in the bundle.
func caEntries(root string) ([]cpioEntry, int, error) {
	dir := filepath.Join(root, filepath.FromSlash(caCertsDir))
	available, err := findCerts(dir)
	if err != nil {
		return nil, 0, fmt.Errorf("images: ca-certificates: %w", err)
	}
	enabled := available
	if conf, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(caConfPath))); err == nil {
		enabled = enabledCerts(conf, available)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, 0, fmt.Errorf("images: ca-certificates: %w", err)
	}
	if len(enabled) == 0 {
		return nil, 0, fmt.Errorf("images: ca-certificates: no certificates under /%s", caCertsDir)
	}

	var bundle bytes.Buffer
	var entries []cpioEntry
	count := 0
	for _, rel := range enabled {
		src := filepath.Join(dir, filepath.FromSlash(rel))
		b, err := os.ReadFile(src)
		if err != nil {
			return nil, 0, fmt.Errorf("images: ca-certificates: %w", err)
		}
		n := countPEMCerts(b)
		if n == 0 {
			return nil, 0, fmt.Errorf("images: ca-certificates: %s holds no PEM certificate", rel)
		}
		count += n
		bundle.Write(b)
		if len(b) > 0 && b[len(b)-1] != '\n' {
			bundle.WriteByte('\n')
		}
		entries = append(entries, cpioEntry{Name: path.Join(caCertsDir, rel), Mode: modeFile | 0o644, Source: src})
	}
	entries = append(entries, fileEntry(caBundlePath, 0o644, bundle.Bytes()))
	return entries, count, nil
}

// findCerts lists the regular *.crt files under dir, relative to it with
// slashes, in byte order.
func findCerts(dir string) ([]string, error) {
	var certs []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() || !strings.HasSuffix(d.Name(), ".crt") {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		certs = append(certs, filepath.ToSlash(rel))
		return nil
	})
	sort.Strings(certs)
	return certs, err
}

// enabledCerts reads an /etc/ca-certificates.conf: one certificate path
// (relative to /usr/share/ca-certificates) a line, "!" before a path
// disables it, "#" starts a comment line. It returns the available paths
// the file enables, in byte order; like update-ca-certificates it skips
// names with no file.
func enabledCerts(conf []byte, available []string) []string {
	have := map[string]bool{}
	for _, a := range available {
		have[a] = true
	}
	on := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(conf))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "!") {
			continue
		}
		if have[line] {
			on[line] = true
		}
	}
	var enabled []string
	for _, a := range available {
		if on[a] {
			enabled = append(enabled, a)
		}
	}
	return enabled
}

func countPEMCerts(b []byte) int {
	n := 0
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return n
		}
		if blk.Type == "CERTIFICATE" {
			n++
		}
	}
}
