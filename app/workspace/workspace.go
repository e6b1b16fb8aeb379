// Package workspace decides which host folder may be shared with the guest.
// Only one folder is ever shared; it is canonicalised (symlinks resolved) and
// refused when it is the file system root, the home folder itself, a folder
// that contains the home folder, a system folder, or a folder of the home
// that holds keys and credentials (~/.ssh, ~/.aws …) or contains one.
package workspace

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// ErrRefused wraps every reason a folder cannot be shared.
var ErrRefused = errors.New("folder cannot be shared")

// Host describes the machine a folder is validated for. It is a parameter
// so one table test covers every OS.
type Host struct {
	// GOOS is "linux", "darwin" or "windows".
	GOOS string
	// Home is the user's canonical home folder.
	Home string
	// Resolve canonicalises a path (filepath.Abs + EvalSymlinks on the real machine).
	Resolve func(string) (string, error)
	// Stat reports on a canonical path (os.Stat on the real machine).
	Stat func(string) (fs.FileInfo, error)
	// Read lists one entry of a canonical folder (readable on the real
	// machine), so a folder the user may not read is refused before a VM
	// boots on it; nil skips the check.
	Read func(string) error
}

// Local returns the Host for the machine this program runs on.
func Local(goos string) (Host, error) {
	home, err := os.UserHomeDir()
	if err != nil {
		return Host{}, fmt.Errorf("workspace: find home folder: %w", err)
	}
	if h, err := canonical(home); err == nil {
		home = h
	}
	return Host{GOOS: goos, Home: home, Resolve: canonical, Stat: os.Stat, Read: readable}, nil
}

// readable opens the folder p and reads one entry of it, as the hypervisor
// sharing it will.
func readable(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Readdirnames(1); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

func canonical(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	return filepath.EvalSymlinks(abs)
}

// Validate returns the canonical form of dir if it may be shared, or an
// error that says why not and what to do instead.
func (h Host) Validate(dir string) (string, error) {
	if strings.TrimSpace(dir) == "" {
		return "", fmt.Errorf("%w: no folder given", ErrRefused)
	}
	p, err := h.Resolve(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("%w: %s does not exist; create it first or choose another folder", ErrRefused, dir)
		}
		return "", fmt.Errorf("%w: %s: %v", ErrRefused, dir, err)
	}
	fi, err := h.Stat(p)
	if err != nil {
		return "", fmt.Errorf("%w: %s: %v", ErrRefused, dir, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%w: %s is a file, not a folder; choose the folder that contains it", ErrRefused, p)
	}
	if reason, inside := h.refusal(p); reason != "" {
		if inside {
			return "", fmt.Errorf("%w: %s is %s; choose a project folder inside it instead", ErrRefused, p, reason)
		}
		return "", fmt.Errorf("%w: %s is %s; choose a folder of your own, such as a project folder in your home folder", ErrRefused, p, reason)
	}
	if reason := h.sensitive(p); reason != "" {
		return "", fmt.Errorf("%w: %s %s; choose a project folder elsewhere", ErrRefused, p, reason)
	}
	if h.Read != nil {
		if err := h.Read(p); err != nil {
			if errors.Is(err, fs.ErrPermission) {
				return "", fmt.Errorf("%w: you cannot read this folder (%s); share a folder you can read, or change its permissions", ErrRefused, p)
			}
			return "", fmt.Errorf("%w: %s cannot be read: %v", ErrRefused, p, err)
		}
	}
	return p, nil
}

// sep is the path separator of h's OS.
func (h Host) sep() string {
	if h.GOOS == "windows" {
		return `\`
	}
	return "/"
}

// norm puts a path in the form refusal compares.
func (h Host) norm(s string) string {
	s = strings.TrimRight(s, h.sep())
	if h.GOOS == "windows" || h.GOOS == "darwin" {
		s = strings.ToLower(s) // case-insensitive file systems by default
	}
	return s
}

// refusal says why the canonical path p is refused, or "" when it is fine,
// and whether a folder inside p may be shared.
func (h Host) refusal(p string) (reason string, inside bool) {
	sep, norm := h.sep(), h.norm
	np := norm(p)
	if np == "" || (h.GOOS == "windows" && len(np) == 2 && np[1] == ':') {
		return "the root of the file system", true
	}
	if h.Home != "" {
		home := norm(h.Home)
		if np == home {
			return "your home folder", true
		}
		if strings.HasPrefix(home, np+sep) {
			return "a folder that contains your home folder", true
		}
	}
	under := func(base string) bool { b := norm(base); return np == b || strings.HasPrefix(np, b+sep) }
	for _, s := range systemTrees[h.GOOS] {
		if under(s) {
			return "a system folder", false
		}
	}
	for _, s := range systemFolders[h.GOOS] {
		if np == norm(s) {
			return "a system folder", true
		}
	}
	return "", false
}

// sensitive says how the canonical path p touches a folder of the home
// that holds keys, credentials, or settings and programs the user's
// account runs (a task could read them, or plant a program that runs on
// the host), or "" when it does not. Such a folder is refused with
// everything inside it, and so is a folder that contains one. A folder
// that is a symlink (dotfiles kept elsewhere) is matched at its target
// too.
func (h Host) sensitive(p string) string {
	if h.Home == "" {
		return ""
	}
	sep := h.sep()
	np := h.norm(p)
	for _, rel := range sensitiveHome[h.GOOS] {
		rel = strings.ReplaceAll(rel, "/", sep)
		full := strings.TrimRight(h.Home, sep) + sep + rel
		places := []string{h.norm(full)}
		if h.Resolve != nil {
			if r, err := h.Resolve(full); err == nil && h.norm(r) != places[0] {
				places = append(places, h.norm(r))
			}
		}
		name := "~" + sep + rel
		for _, c := range places {
			switch {
			case np == c || strings.HasPrefix(np, c+sep):
				return "is inside " + name + ", " + sensitiveRule(h.GOOS, sep)
			case strings.HasPrefix(c, np+sep):
				return "contains " + name + ", " + sensitiveRule(h.GOOS, sep)
			}
		}
	}
	return ""
}

// sensitiveRule names the rule in a refusal.
func sensitiveRule(goos, sep string) string {
	var names []string
	for _, rel := range sensitiveHome[goos] {
		names = append(names, "~"+sep+strings.ReplaceAll(rel, "/", sep))
	}
	return "which holds keys, credentials or settings your account runs: Airlock never shares " +
		strings.Join(names, ", ") + ", nor a folder that contains one"
}

// sensitiveHome are the folders of the home (relative to it, with /) that
// sensitive refuses: SSH and GnuPG keys, the XDG config and data folders
// (credentials of many tools, gcloud's among them; autostart entries;
// ~/.local/bin on the PATH; the desktop keyring), cloud and cluster
// credentials, and the keychains.
var sensitiveHome = map[string][]string{
	"linux": {".ssh", ".gnupg", ".config", ".local", ".aws", ".azure", ".kube", ".docker", ".password-store"},
	"darwin": {".ssh", ".gnupg", ".config", ".local", ".aws", ".azure", ".kube", ".docker", ".password-store",
		"Library/Keychains"},
	"windows": {".ssh", ".gnupg", ".config", ".local", ".aws", ".azure", ".kube", ".docker",
		"AppData/Roaming/gcloud", "AppData/Roaming/gnupg", "AppData/Roaming/Microsoft/Credentials",
		"AppData/Local/Microsoft/Credentials", "AppData/Roaming/Microsoft/Protect",
		"AppData/Roaming/Microsoft/Windows/Start Menu/Programs/Startup"},
}

// systemTrees are refused together with everything inside them.
var systemTrees = map[string][]string{
	"linux": {"/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc",
		"/run", "/sbin", "/sys", "/usr", "/snap", "/var/lib", "/var/log", "/var/cache", "/var/run"},
	"darwin": {"/System", "/bin", "/sbin", "/usr", "/dev", "/etc", "/private/etc", "/Library",
		"/Applications", "/cores", "/private/var/db", "/private/var/root"},
	"windows": {`C:\Windows`, `C:\Program Files`, `C:\Program Files (x86)`, `C:\ProgramData`,
		`C:\$Recycle.Bin`, `C:\System Volume Information`},
}

// systemFolders are refused themselves; folders inside them are fine
// (/tmp/project, /Volumes/Disk/project, D:\work).
var systemFolders = map[string][]string{
	"linux":   {"/home", "/root", "/tmp", "/var", "/var/tmp", "/opt", "/srv", "/mnt", "/media"},
	"darwin":  {"/Users", "/Volumes", "/private", "/private/var", "/private/tmp", "/tmp", "/var", "/opt", "/private/var/folders"},
	"windows": {`C:\Users`},
}
