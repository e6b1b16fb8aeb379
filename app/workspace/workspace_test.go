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
