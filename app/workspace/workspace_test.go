package workspace

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

type fakeInfo struct{ dir bool }

func (f fakeInfo) Name() string       { return "x" }
func (f fakeInfo) Size() int64        { return 0 }
func (f fakeInfo) Mode() fs.FileMode  { return map[bool]fs.FileMode{true: fs.ModeDir, false: 0}[f.dir] }
func (f fakeInfo) ModTime() time.Time { return time.Time{} }
func (f fakeInfo) IsDir() bool        { return f.dir }
func (f fakeInfo) Sys() any           { return nil }

// fakeHost resolves through a symlink table and knows which paths are files.
func fakeHost(goos, home string, links map[string]string, files ...string) Host {
	return Host{
		GOOS: goos, Home: home,
		Resolve: func(p string) (string, error) {
			if strings.Contains(p, "missing") {
				return "", fs.ErrNotExist
			}
			if t, ok := links[p]; ok {
				return t, nil
			}
			return p, nil
		},
		Stat: func(p string) (fs.FileInfo, error) {
			for _, f := range files {
				if f == p {
					return fakeInfo{dir: false}, nil
				}
			}
			return fakeInfo{dir: true}, nil
		},
	}
}

func TestValidate(t *testing.T) {
	links := map[string]string{"/home/ann/link": "/etc", "/home/ann/ok-link": "/home/ann/reports"}
	tests := []struct {
		goos, home, dir string
		want            string // canonical path, or a substring of the error
		ok              bool
	}{
		{"linux", "/home/ann", "/home/ann/reports", "/home/ann/reports", true},
		{"linux", "/home/ann", "/home/ann/ok-link", "/home/ann/reports", true},
		{"linux", "/home/ann", "/tmp/job", "/tmp/job", true},
		{"linux", "/home/ann", "/srv/data/x", "/srv/data/x", true},
		{"linux", "/home/ann", "/", "root of the file system", false},
		{"linux", "/home/ann", "/home/ann", "your home folder", false},
		{"linux", "/home/ann", "/home/ann/", "your home folder", false},
		{"linux", "/home/ann", "/home", "contains your home folder", false},
		{"linux", "/home/ann", "/etc", "system folder", false},
		{"linux", "/home/ann", "/etc/ssh", "system folder", false},
		{"linux", "/home/ann", "/usr/local/src", "system folder", false},
		{"linux", "/home/ann", "/home/ann/link", "system folder", false},
		{"linux", "/home/ann", "/tmp", "system folder", false},
		{"linux", "/home/ann", "/var", "system folder", false},
		{"linux", "/home/ann", "/home/ann/missing", "does not exist", false},
		{"linux", "/home/ann", "/home/ann/notes.txt", "is a file", false},
		{"linux", "/home/ann", "", "no folder given", false},
		{"darwin", "/Users/ann", "/Users/ann/Documents/q3", "/Users/ann/Documents/q3", true},
		{"darwin", "/Users/ann", "/users/ANN", "your home folder", false},
		{"darwin", "/Users/ann", "/System/Library", "system folder", false},
		{"darwin", "/Users/ann", "/Users", "contains your home folder", false},
		{"darwin", "/Users/ann", "/private/var/folders/xy/T/job", "/private/var/folders/xy/T/job", true},
		{"darwin", "/Users/ann", "/Volumes/Disk/work", "/Volumes/Disk/work", true},
		{"windows", `C:\Users\ann`, `C:\Users\ann\Documents\q3`, `C:\Users\ann\Documents\q3`, true},
		{"windows", `C:\Users\ann`, `c:\users\ann`, "your home folder", false},
		{"windows", `C:\Users\ann`, `C:\`, "root of the file system", false},
		{"windows", `C:\Users\ann`, `D:\`, "root of the file system", false},
		{"windows", `C:\Users\ann`, `C:\Windows\System32`, "system folder", false},
		{"windows", `C:\Users\ann`, `C:\Program Files\App`, "system folder", false},
		{"windows", `C:\Users\ann`, `D:\work`, `D:\work`, true},
	}
	for _, tt := range tests {
		t.Run(tt.goos+" "+tt.dir, func(t *testing.T) {
			h := fakeHost(tt.goos, tt.home, links, "/home/ann/notes.txt")
			got, err := h.Validate(tt.dir)
			if tt.ok {
				if err != nil || got != tt.want {
					t.Fatalf("Validate(%q) = %q, %v; want %q", tt.dir, got, err, tt.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, ErrRefused) {
				t.Fatalf("Validate(%q) = %q, %v; want an ErrRefused saying %q", tt.dir, got, err, tt.want)
			}
		})
	}
}

// TestValidateSensitiveHomeFolders: the folders of the home that hold
// keys and credentials, what is inside them, and what contains them, are
// refused like the home itself, with the rule named.
func TestValidateSensitiveHomeFolders(t *testing.T) {
	links := map[string]string{
		"/home/ann/.config":       "/home/ann/dotfiles/config", // kept in a dotfiles repository
		"/home/ann/ssh-link":      "/home/ann/.ssh",
		"/srv/ann-dotfiles/x":     "/srv/ann-dotfiles/x",
		"/Users/ann/Library/Keys": "/Users/ann/Library/Keychains",
	}
	tests := []struct {
		goos, home, dir string
		want            string // canonical path, or a substring of the error
		ok              bool
	}{
		{"linux", "/home/ann", "/home/ann/.ssh", "is inside ~/.ssh, which holds keys", false},
		{"linux", "/home/ann", "/home/ann/.ssh/", "is inside ~/.ssh", false},
		{"linux", "/home/ann", "/home/ann/.ssh/keys", "is inside ~/.ssh", false},
		{"linux", "/home/ann", "/home/ann/ssh-link", "is inside ~/.ssh", false},
		{"linux", "/home/ann", "/home/ann/.gnupg", "is inside ~/.gnupg", false},
		{"linux", "/home/ann", "/home/ann/.config/gcloud", "is inside ~/.config", false},
		{"linux", "/home/ann", "/home/ann/dotfiles/config/gcloud", "is inside ~/.config", false},
		{"linux", "/home/ann", "/home/ann/dotfiles", "contains ~/.config", false},
		{"linux", "/home/ann", "/home/ann/.local/bin", "is inside ~/.local", false},
		{"linux", "/home/ann", "/home/ann/.local", "is inside ~/.local", false},
		{"linux", "/home/ann", "/home/ann/.aws", "is inside ~/.aws", false},
		{"linux", "/home/ann", "/home/ann/.azure", "is inside ~/.azure", false},
		{"linux", "/home/ann", "/home/ann/.kube", "is inside ~/.kube", false},
		{"linux", "/home/ann", "/home/ann/.docker", "is inside ~/.docker", false},
		{"linux", "/home/ann", "/home/ann/.aws", "Airlock never shares ~/.ssh, ~/.gnupg, ~/.config", false},
		{"linux", "/home/ann", "/home/ann", "your home folder", false},
		{"linux", "/home/ann", "/home/ann/.sshkeys-notes", "/home/ann/.sshkeys-notes", true},
		{"linux", "/home/ann", "/home/ann/projects/.config", "/home/ann/projects/.config", true},
		{"linux", "/home/ann", "/home/ann/code/app/.aws", "/home/ann/code/app/.aws", true},
		{"linux", "/home/ann", "/srv/ann-dotfiles/x", "/srv/ann-dotfiles/x", true},
		{"darwin", "/Users/ann", "/Users/ann/Library/Keychains", "is inside ~/Library/Keychains", false},
		{"darwin", "/Users/ann", "/users/ANN/library/keychains/x", "is inside ~/Library/Keychains", false},
		{"darwin", "/Users/ann", "/Users/ann/Library/Keys", "is inside ~/Library/Keychains", false},
		{"darwin", "/Users/ann", "/Users/ann/Library", "contains ~/Library/Keychains", false},
		{"darwin", "/Users/ann", "/Users/ann/.SSH", "is inside ~/.ssh", false},
		{"darwin", "/Users/ann", "/Users/ann/.config/gcloud", "is inside ~/.config", false},
		{"darwin", "/Users/ann", "/Users/ann/.aws/sso", "is inside ~/.aws", false},
		{"darwin", "/Users/ann", "/Users/ann/Library/Mobile Documents/x", "/Users/ann/Library/Mobile Documents/x", true},
		{"darwin", "/Users/ann", "/Users/ann/Documents/q3", "/Users/ann/Documents/q3", true},
		{"windows", `C:\Users\ann`, `C:\Users\ann\.ssh`, `is inside ~\.ssh`, false},
		{"windows", `C:\Users\ann`, `c:\users\ann\.AWS\cli`, `is inside ~\.aws`, false},
		{"windows", `C:\Users\ann`, `C:\Users\ann\.kube`, `is inside ~\.kube`, false},
		{"windows", `C:\Users\ann`, `C:\Users\ann\AppData\Roaming\gcloud`, `is inside ~\AppData\Roaming\gcloud`, false},
		{"windows", `C:\Users\ann`, `C:\Users\ann\AppData\Roaming\Microsoft\Credentials`, `is inside ~\AppData\Roaming\Microsoft\Credentials`, false},
		{"windows", `C:\Users\ann`, `C:\Users\ann\AppData\Roaming\Microsoft\Protect\S-1-5`, `is inside ~\AppData\Roaming\Microsoft\Protect`, false},
		{"windows", `C:\Users\ann`, `C:\Users\ann\AppData`, `contains ~\AppData\Roaming\gcloud`, false},
		{"windows", `C:\Users\ann`, `C:\Users\ann\AppData\Local`, `contains ~\AppData\Local\Microsoft\Credentials`, false},
		{"windows", `C:\Users\ann`, `C:\Users\ann\AppData\Local\Temp\job`, `C:\Users\ann\AppData\Local\Temp\job`, true},
		{"windows", `C:\Users\ann`, `D:\work\.ssh`, `D:\work\.ssh`, true},
	}
	for _, tt := range tests {
		t.Run(tt.goos+" "+tt.dir, func(t *testing.T) {
			h := fakeHost(tt.goos, tt.home, links)
			got, err := h.Validate(tt.dir)
			if tt.ok {
				if err != nil || got != tt.want {
					t.Fatalf("Validate(%q) = %q, %v; want %q", tt.dir, got, err, tt.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, ErrRefused) {
				t.Fatalf("Validate(%q) = %q, %v; want an ErrRefused saying %q", tt.dir, got, err, tt.want)
			}
			if !strings.Contains(err.Error(), "your home folder") && !strings.Contains(err.Error(), "elsewhere") {
				t.Fatalf("Validate(%q): %v: says no way out", tt.dir, err)
			}
		})
	}
}

// TestLocal checks the real resolver: a symlink to a folder is followed.
func TestLocal(t *testing.T) {
	h, err := Local("linux")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	want, _ := filepath.EvalSymlinks(real)
	if got, err := h.Validate(link); err != nil || got != want {
		t.Fatalf("Validate(link) = %q, %v; want %q", got, err, want)
	}
	if _, err := h.Validate(filepath.Join(dir, "nope")); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("missing folder: %v", err)
	}
}

// TestValidateSystemTreeAdvice: a folder inside a system tree is refused
// like the tree, so the refusal of /usr/share/doc must not send the user
// into it; a folder only refused itself (/tmp) may be left for one inside.
func TestValidateSystemTreeAdvice(t *testing.T) {
	h := fakeHost("linux", "/home/ann", nil)
	_, err := h.Validate("/usr/share/doc")
	if err == nil || strings.Contains(err.Error(), "inside it") || !strings.Contains(err.Error(), "a folder of your own") {
		t.Fatalf("Validate(/usr/share/doc) = %v; want advice away from the system tree", err)
	}
	if _, err := h.Validate("/tmp"); err == nil || !strings.Contains(err.Error(), "inside it") {
		t.Fatalf("Validate(/tmp) = %v; want a folder inside it suggested", err)
	}
}

// TestValidateUnreadable: a folder the user may not read is refused with
// that cause, before any hypervisor tries to open it.
func TestValidateUnreadable(t *testing.T) {
	h := fakeHost("linux", "/home/ann", nil)
	h.Read = func(p string) error { return &fs.PathError{Op: "open", Path: p, Err: fs.ErrPermission} }
	_, err := h.Validate("/home/ann/locked")
	if err == nil || !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "you cannot read this folder (/home/ann/locked)") {
		t.Fatalf("Validate(unreadable) = %v", err)
	}
}

// TestLocalUnreadable: on the real machine, a folder with no read
// permission is refused for an ordinary user; root reads every folder, so
// it is shared.
func TestLocalUnreadable(t *testing.T) {
	h, err := Local("linux")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "locked")
	if err := os.Mkdir(dir, 0o000); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(dir, 0o755) })
	_, err = h.Validate(dir)
	if os.Geteuid() == 0 {
		if err != nil {
			t.Fatalf("root: Validate(0000 folder) = %v; root reads it", err)
		}
		return
	}
	if err == nil || !strings.Contains(err.Error(), "you cannot read this folder") {
		t.Fatalf("Validate(0000 folder) = %v; want \"you cannot read this folder\"", err)
	}
}
