package boot

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseModules(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		paths    []string
		problems int
		err      bool
	}{
		{"empty", "", nil, 0, false},
		{"ordered", "/lib/modules/6.1/a.ko\n\n# comment\n  /lib/modules/6.1/b.ko.xz  \n", []string{"/lib/modules/6.1/a.ko", "/lib/modules/6.1/b.ko.xz"}, 0, false},
		{"relative and unclean skipped", "a.ko\n/lib/../x.ko\n/ok.ko\n/with space.ko\n", []string{"/ok.ko"}, 3, false},
		{"no trailing newline", "/a.ko", []string{"/a.ko"}, 0, false},
		{"line too long", "/" + strings.Repeat("a", 5000) + "\n", nil, 0, true},
		{"too many", strings.Repeat("/a.ko\n", maxModules+1), nil, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			paths, problems, err := ParseModules(strings.NewReader(tt.in))
			if (err != nil) != tt.err {
				t.Fatalf("err = %v", err)
			}
			if tt.err {
				return
			}
			if !reflect.DeepEqual(paths, tt.paths) || len(problems) != tt.problems {
				t.Errorf("paths %q problems %q", paths, problems)
			}
		})
	}
}

func TestCompressed(t *testing.T) {
	for p, want := range map[string]bool{"/a.ko": false, "/a.ko.xz": true, "/a.ko.zst": true, "/a.ko.gz": true, "/ko.xz/a.ko": false} {
		if got := compressed(p); got != want {
			t.Errorf("compressed(%q) = %v", p, got)
		}
	}
}
