package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const testdata = "github.com/airlock-sandbox/airlock/build/tsgen/testdata/"

// TestGenerate compares the TypeScript of testdata/wire with
// testdata/*.ts.golden; UPDATE_GOLDEN=1 rewrites them.
func TestGenerate(t *testing.T) {
	files, err := Generate(".", []string{testdata + "wire.API", testdata + "wire.Thing"})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 {
		t.Errorf("files %d, want wire.ts and other.ts", len(files))
	}
	for name, got := range files {
		golden := filepath.Join("testdata", name+".golden")
		if os.Getenv("UPDATE_GOLDEN") != "" {
			if err := os.WriteFile(golden, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatalf("%v (UPDATE_GOLDEN=1 writes it)", err)
		}
		if string(got) != string(want) {
			t.Errorf("%s:\n%s\nwant (UPDATE_GOLDEN=1 rewrites):\n%s", name, got, want)
		}
	}
}

// TestGenerateRefuses checks that a shape tsgen cannot know fails with the
// type's name instead of turning into a wrong type.
func TestGenerateRefuses(t *testing.T) {
	for _, tc := range []struct{ root, want string }{
		{testdata + "bad.HasCustom", "writes its own JSON"},
		{testdata + "bad.HasFunc", "has no JSON form"},
		{testdata + "bad.Missing", "declares no exported type Missing"},
		{"nodot", "want import/path.TypeName"},
	} {
		_, err := Generate(".", []string{tc.root})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q", tc.root, err, tc.want)
		}
	}
}

// TestWriteRemovesStale checks that a type gone from Go leaves no file.
func TestWriteRemovesStale(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "gone.ts"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := write(dir, map[string][]byte{"kept.ts": []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "gone.ts")); !os.IsNotExist(err) {
		t.Errorf("gone.ts still there: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "kept.ts")); err != nil || string(b) != "x" {
		t.Errorf("kept.ts: %q, %v", b, err)
	}
}
