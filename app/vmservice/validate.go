package vmservice

import (
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"strings"

	"github.com/airlock-sandbox/airlock/app/workspace"
	"github.com/airlock-sandbox/airlock/vm"
	"github.com/airlock-sandbox/airlock/vm/hcs"
)

// Caller is the account a request comes from, as the pipe's client token
// says (never as the request says).
type Caller struct {
	// SID is the caller's user SID.
	SID string
	// Profile is the caller's canonical profile folder (refused as a share).
	Profile string
	// Token is the caller's impersonation token; HCS adds the workspace
	// share as this account. Zero in tests.
	Token uintptr
}

// Files is what validation needs from the file system; the service's
// runs as SYSTEM on the real one, tests use a map.
type Files interface {
	// Resolve canonicalises an absolute path: links and short names
	// resolved, the case the file system stores.
	Resolve(path string) (string, error)
	Stat(path string) (fs.FileInfo, error)
	// Owner is the SID that owns path.
	Owner(path string) (string, error)
}

// Policy is what the service allows.
type Policy struct {
	// ImageDir is the installed guest image folder (canonical); kernel and
	// initrd must be inside it.
	ImageDir string
	// StandardDir is the installed standard image's folder (canonical), or
	// "": its kernel, initrd and read-only root disk are accepted too.
	StandardDir string
	// Arch is the host's GOARCH.
	Arch string
	// MaxCPUs and MaxMemoryMiB bound one VM.
	MaxCPUs      int
	MaxMemoryMiB int
}

// Plan is a validated request: the document's spec and what the service
// does around it.
type Plan struct {
	Spec hcs.Spec
	// Grants are the files the VM opens (boot files, disks), each given
	// HcsGrantVmAccess before the VM is created.
	Grants []Grant
	// SharePath is the canonical workspace folder, or "".
	SharePath     string
	ShareReadOnly bool
}

// Grant is one file the VM is given access to.
type Grant struct {
	Path string
	// AsCaller says the grant (and its revocation) is made while
	// impersonating the caller, because the caller can write the folder
	// and could swap the file for a link after validation: as the caller,
	// HcsGrantVmAccess can only change an ACL the caller may change
	// anyway. Files of the installed image, which only administrators can
	// change, are granted as the service.
	AsCaller bool
}

// ErrDenied wraps refusals about whose something is.
var ErrDenied = errors.New("not allowed for this account")

// Limits on what a request may carry.
const (
	maxCmdlineWords = 32
	maxWordLen      = 256
	maxPathLen      = 1024
	minMemoryMiB    = 128
)

// reservedKeys are kernel command line keys the service sets itself.
var reservedKeys = map[string]bool{
	"console": true, "airlock.transport": true, "airlock.share": true,
	"airlock.share_ro": true, "airlock.share_port": true, "nr_cpus": true,
}

func invalid(format string, a ...any) error {
	return fmt.Errorf("%w: %s", vm.ErrInvalidConfig, fmt.Sprintf(format, a...))
}

// Validate checks req from caller and returns what to create.
func (p Policy) Validate(req hcs.CreateRequest, c Caller, f Files) (Plan, error) {
	if !hcs.ValidSID(c.SID) {
		return Plan{}, fmt.Errorf("%w: no usable caller identity", ErrDenied)
	}
	switch {
	case req.CPUs < 1 || req.CPUs > p.MaxCPUs:
		return Plan{}, invalid("%d CPUs: between 1 and %d are allowed", req.CPUs, p.MaxCPUs)
	case req.MemoryMiB < minMemoryMiB || req.MemoryMiB > p.MaxMemoryMiB:
		return Plan{}, invalid("%d MiB of memory: between %d and %d are allowed", req.MemoryMiB, minMemoryMiB, p.MaxMemoryMiB)
	case req.ConsolePipe != "" && !hcs.ValidConsolePipe(req.ConsolePipe, c.SID):
		return Plan{}, fmt.Errorf("%w: console pipe %q is not an Airlock console pipe of this account", ErrDenied, req.ConsolePipe)
	}
	if err := checkCmdline(req.Cmdline); err != nil {
		return Plan{}, err
	}
	kernel, err := p.bootFile("kernel", req.Kernel, f)
	if err != nil {
		return Plan{}, err
	}
	initrd, err := p.bootFile("initrd", req.Initrd, f)
	if err != nil {
		return Plan{}, err
	}
	plan := Plan{
		Spec: hcs.Spec{
			Arch: p.Arch, Kernel: kernel, Initrd: initrd,
			Cmdline: req.Cmdline, CPUs: req.CPUs, MemoryMiB: req.MemoryMiB,
			ConsolePipe: req.ConsolePipe, UserSID: c.SID,
		},
		Grants: []Grant{{Path: kernel}, {Path: initrd}},
	}
	if err := plan.Spec.CheckBoot(); err != nil {
		return Plan{}, invalid("%v", err)
	}
	if len(req.Disks) > vm.MaxDisks {
		return Plan{}, invalid("%d disks: at most %d", len(req.Disks), vm.MaxDisks)
	}
	for _, d := range req.Disks {
		path, err := p.disk(d, c, f)
		if err != nil {
			return Plan{}, err
		}
		plan.Spec.Disks = append(plan.Spec.Disks, hcs.Disk{Path: path, ReadOnly: d.ReadOnly})
		plan.Grants = append(plan.Grants, Grant{Path: path, AsCaller: !p.inImage(path)})
	}
	if req.Share != nil {
		dir, err := shareFolder(req.Share.Path, c, f)
		if err != nil {
			return Plan{}, err
		}
		plan.SharePath, plan.ShareReadOnly = dir, req.Share.ReadOnly
		plan.Spec.Share, plan.Spec.ShareReadOnly = true, req.Share.ReadOnly
	}
	return plan, nil
}

func checkCmdline(words []string) error {
	if len(words) > maxCmdlineWords {
		return invalid("%d kernel command line words: at most %d", len(words), maxCmdlineWords)
	}
	for _, w := range words {
		if w == "" || len(w) > maxWordLen {
			return invalid("kernel command line word of %d bytes", len(w))
		}
		for _, r := range w {
			if r <= ' ' || r > '~' || r == '"' {
				return invalid("kernel command line word %q has a space, quote or non-ASCII character", w)
			}
		}
		key, _, _ := strings.Cut(w, "=")
		if reservedKeys[key] {
			return invalid("kernel command line key %q is set by the service", key)
		}
	}
	return nil
}

// bootFile checks a kernel or initrd path: canonical, a regular file
// inside the installed image folder.
func (p Policy) bootFile(what, path string, f Files) (string, error) {
	if err := CanonicalForm(path); err != nil {
		return "", invalid("%s: %v", what, err)
	}
	real, err := f.Resolve(path)
	if err != nil {
		return "", invalid("%s %s: %v", what, path, err)
	}
	if !strings.EqualFold(real, path) {
		return "", invalid("%s %s is not canonical (it is %s)", what, path, real)
	}
	if !p.inImage(real) {
		return "", fmt.Errorf("%w: %s %s is outside the installed image folder %s", ErrDenied, what, real, p.ImageDir)
	}
	fi, err := f.Stat(real)
	if err != nil {
		return "", invalid("%s %s: %v", what, real, err)
	}
	if !fi.Mode().IsRegular() {
		return "", invalid("%s %s is not a regular file", what, real)
	}
	return real, nil
}

// inImage reports whether path is inside an installed image folder.
func (p Policy) inImage(path string) bool {
	return (p.ImageDir != "" && within(path, p.ImageDir)) || (p.StandardDir != "" && within(path, p.StandardDir))
}

// disk checks a disk file: canonical, a regular .vhd file, and either an
// installed image's disk, attached read-only, or a file the caller owns
// (the persistent disk in their state folder). The VM gets access to it,
// so a caller can never attach another account's file, nor write to the
// installed image that every account boots.
func (p Policy) disk(d hcs.DiskRequest, c Caller, f Files) (string, error) {
	if err := CanonicalForm(d.Path); err != nil {
		return "", invalid("disk: %v", err)
	}
	real, err := f.Resolve(d.Path)
	if err != nil {
		return "", invalid("disk %s: %v", d.Path, err)
	}
	if !strings.EqualFold(real, d.Path) {
		return "", invalid("disk %s is not canonical (it is %s)", d.Path, real)
	}
	if !strings.HasSuffix(strings.ToLower(real), ".vhd") {
		return "", invalid("disk %s is not a .vhd file", real)
	}
	fi, err := f.Stat(real)
	if err != nil {
		return "", invalid("disk %s: %v", real, err)
	}
	if !fi.Mode().IsRegular() {
		return "", invalid("disk %s is not a regular file", real)
	}
	if p.inImage(real) {
		if !d.ReadOnly {
			return "", fmt.Errorf("%w: disk %s is part of the installed image and is attached read-only only", ErrDenied, real)
		}
		return real, nil
	}
	owner, err := f.Owner(real)
	if err != nil {
		return "", fmt.Errorf("%w: disk %s: cannot read its owner: %v", ErrDenied, real, err)
	}
	if owner != c.SID {
		return "", fmt.Errorf("%w: disk %s belongs to another account (%s)", ErrDenied, real, owner)
	}
	return real, nil
}

// shareFolder checks the workspace: canonical, shareable by the rules of
// app/workspace (not a drive root, the profile itself, a folder above it,
// or a system folder), and owned by the caller.
func shareFolder(path string, c Caller, f Files) (string, error) {
	if err := CanonicalForm(path); err != nil {
		return "", invalid("workspace: %v", err)
	}
	host := workspace.Host{GOOS: "windows", Home: c.Profile, Resolve: f.Resolve, Stat: f.Stat}
	dir, err := host.Validate(path)
	if err != nil {
		return "", fmt.Errorf("%w: %w", vm.ErrInvalidConfig, err)
	}
	if !strings.EqualFold(dir, path) {
		return "", invalid("workspace %s is not canonical (it is %s)", path, dir)
	}
	owner, err := f.Owner(dir)
	if err != nil {
		return "", fmt.Errorf("%w: workspace %s: cannot read its owner: %v", ErrDenied, dir, err)
	}
	if owner != c.SID {
		return "", fmt.Errorf("%w: workspace %s belongs to another account (%s); share a folder you own", ErrDenied, dir, owner)
	}
	return dir, nil
}

// within reports whether path is strictly inside dir (case-insensitive).
func within(path, dir string) bool {
	return strings.HasPrefix(strings.ToLower(path), strings.ToLower(strings.TrimRight(dir, `\`))+`\`)
}

var drivePath = regexp.MustCompile(`^[A-Za-z]:\\`)

// CanonicalForm checks that p is written as a canonical local Windows
// path: drive-absolute, backslashes only, no empty, "." or ".." parts, no
// alternate data streams, no trailing dots or spaces (which Windows strips,
// so two spellings would name one file), no device or UNC prefixes.
func CanonicalForm(p string) error {
	switch {
	case len(p) > maxPathLen:
		return fmt.Errorf("path longer than %d bytes", maxPathLen)
	case !drivePath.MatchString(p):
		return fmt.Errorf("%q is not an absolute path on a local drive", p)
	case strings.ContainsAny(p, "/\x00*?\"<>|"):
		return fmt.Errorf("%q has characters a canonical path does not", p)
	}
	rest := p[3:]
	if rest == "" {
		return nil
	}
	for _, part := range strings.Split(rest, `\`) {
		switch {
		case part == "" || part == "." || part == "..":
			return fmt.Errorf("%q is not clean", p)
		case strings.Contains(part, ":"):
			return fmt.Errorf("%q names a data stream", p)
		case strings.HasSuffix(part, ".") || strings.HasSuffix(part, " "):
			return fmt.Errorf("%q has a part ending in a dot or space", p)
		}
		for _, r := range part {
			if r < ' ' {
				return fmt.Errorf("%q has a control character", p)
			}
		}
	}
	return nil
}
