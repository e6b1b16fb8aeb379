package boot

import (
	"io"
	"os"
	"strings"
	"testing"
)

// TestStartNoNewPrivs: the child has no_new_privs from its start.
func TestStartNoNewPrivs(t *testing.T) {
	nnpLine(t, "/proc/self/status")
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	p, err := startNoNewPrivs("/bin/sh", []string{"sh", "-c", "grep NoNewPrivs /proc/self/status"},
		&os.ProcAttr{Files: []*os.File{nil, w, os.Stderr}})
	w.Close()
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(r)
	if st, err := p.Wait(); err != nil || !st.Success() {
		t.Fatalf("child: %v %v", st, err)
	}
	if got := strings.TrimSpace(string(out)); got != "NoNewPrivs:\t1" {
		t.Fatalf("child has %q", got)
	}
	if _, err := startNoNewPrivs("/nonexistent", []string{"x"}, &os.ProcAttr{}); err == nil {
		t.Fatal("started a missing program")
	}
}

func nnpLine(t *testing.T, path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for l := range strings.Lines(string(b)) {
		if strings.HasPrefix(l, "NoNewPrivs:") {
			return strings.TrimSpace(l)
		}
	}
	t.Skip("kernel without NoNewPrivs in status")
	return ""
}
