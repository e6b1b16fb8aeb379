//go:build !windows

package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/app/changes"
	"github.com/airlock-sandbox/airlock/app/service"
)

// changesCore answers the change calls from canned data and records what
// it was asked.
type changesCore struct {
	fakeCore
	asked []string
}

const guestName = "x\x1b]0;pwn\x07<script>.html"

func (c *changesCore) Changes(context.Context) (service.ChangesList, error) {
	return service.ChangesList{Mode: changes.Review, Entries: []changes.Entry{{Path: guestName, Kind: changes.Added, Type: changes.File, Size: 4}},
		Usage: changes.Usage{LimitBytes: changes.DefaultLimit}}, nil
}

func (c *changesCore) Diff(_ context.Context, paths []string, w io.Writer) error {
	c.asked = append(c.asked, "diff "+strings.Join(paths, ","))
	if slices.Contains(paths, "missing") {
		return fmt.Errorf("changes: missing: %w", fs.ErrNotExist)
	}
	_, err := fmt.Fprintf(w, "--- a/%s\n+++ b/%s\n@@ -0,0 +1 @@\n+<script>alert(1)</script>\n", paths[0], paths[0])
	return err
}

func (c *changesCore) Content(_ context.Context, path string) (io.ReadCloser, changes.Entry, error) {
	body := "<html><script>alert(1)</script></html>"
	if path == "pic.png" {
		body = "\x89PNG\r\n\x1a\n" + strings.Repeat("\x00", 600)
	}
	return io.NopCloser(strings.NewReader(body)), changes.Entry{Path: path, Size: int64(len(body))}, nil
}

func (c *changesCore) Apply(_ context.Context, paths []string, force bool) (changes.ApplyResult, error) {
	c.asked = append(c.asked, fmt.Sprintf("apply %s %t", strings.Join(paths, ","), force))
	if slices.Contains(paths, "busy") {
		return changes.ApplyResult{}, fmt.Errorf("changes: /s: %w", changes.ErrInUse)
	}
	return changes.ApplyResult{Checkpoint: "c1", Applied: paths, Conflicts: []string{"c.txt"}}, nil
}

func (c *changesCore) Discard(_ context.Context, paths []string) ([]string, error) {
	c.asked = append(c.asked, "discard "+strings.Join(paths, ","))
	return paths, nil
}

func (c *changesCore) Checkpoints(context.Context) (service.CheckpointList, error) {
	return service.CheckpointList{Checkpoints: []changes.Checkpoint{{ID: "c1", Paths: []string{"a"}}}}, nil
}

func (c *changesCore) Undo(_ context.Context, id string) (changes.Checkpoint, error) {
	c.asked = append(c.asked, "undo "+id)
	return changes.Checkpoint{ID: "c1", Undone: true}, nil
}

func (c *changesCore) SetWorkspace(_ context.Context, dir string, ro bool, mode changes.Mode) error {
	c.asked = append(c.asked, fmt.Sprintf("workspace %s %t %s", dir, ro, mode))
	return nil
}

// TestChangesEndpoints: each change endpoint reaches the core and back
// through the client; content never runs as a page of the origin.
func TestChangesEndpoints(t *testing.T) {
	core := &changesCore{}
	sock := filepath.Join(t.TempDir(), "run", "airlock.sock")
	l, err := ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go Serve(ctx, l, Handler(core, nil), nil)
	c := NewClient(sock)

	list, err := c.Changes(ctx)
	if err != nil || list.Mode != changes.Review || len(list.Entries) != 1 || list.Entries[0].Path != guestName {
		t.Fatalf("changes: %+v %v", list, err)
	}
	var diff strings.Builder
	if err := c.Diff(ctx, []string{"a b", "c&d"}, &diff); err != nil || !strings.Contains(diff.String(), "+++ b/a b\n") {
		t.Fatalf("diff: %q %v", diff.String(), err)
	}
	if err := c.Diff(ctx, []string{"missing"}, io.Discard); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("diff of a path not pending: %v", err)
	}
	res, err := c.Apply(ctx, []string{"a"}, true)
	if err != nil || res.Checkpoint != "c1" || !slices.Equal(res.Conflicts, []string{"c.txt"}) {
		t.Fatalf("apply: %+v %v", res, err)
	}
	if _, err := c.Apply(ctx, []string{"busy"}, false); !errors.Is(err, changes.ErrInUse) {
		t.Fatalf("apply while another process holds the store: %v", err)
	}
	if gone, err := c.Discard(ctx, nil); err != nil || gone == nil {
		t.Fatalf("discard: %v %v", gone, err)
	}
	if cps, err := c.Checkpoints(ctx); err != nil || len(cps.Checkpoints) != 1 {
		t.Fatalf("checkpoints: %+v %v", cps, err)
	}
	if cp, err := c.Undo(ctx, ""); err != nil || !cp.Undone {
		t.Fatalf("undo: %+v %v", cp, err)
	}
	if err := c.SetWorkspace(ctx, "/w", false, changes.Review); err != nil {
		t.Fatal(err)
	}
	want := []string{"diff a b,c&d", "diff missing", "apply a true", "apply busy false", "discard ", "undo ", "workspace /w false review"}
	if !slices.Equal(core.asked, want) {
		t.Errorf("core asked %q, want %q", core.asked, want)
	}
	rc, e, err := c.Content(ctx, "pic.png")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if len(b) != 608 || e.Size != 608 {
		t.Errorf("content: %d bytes, entry %+v", len(b), e)
	}

	// The headers a browser sees.
	h := Handler(core, nil)
	for _, tc := range []struct{ path, ctype string }{{"pic.png", "image/png"}, {"page.html", "text/html; charset=utf-8"}} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/changes/content?path="+tc.path, nil))
		hd := rec.Header()
		if rec.Code != 200 || hd.Get("Content-Type") != tc.ctype || hd.Get("X-Content-Type-Options") != "nosniff" ||
			!strings.HasPrefix(hd.Get("Content-Security-Policy"), "sandbox") {
			t.Errorf("%s: %d %v", tc.path, rec.Code, hd)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/changes/diff?path=x", nil))
	if ct := rec.Header().Get("Content-Type"); rec.Code != 200 || ct != "text/plain; charset=utf-8" || rec.Header().Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("diff: %d %q", rec.Code, ct)
	}
	for _, bad := range []struct{ method, path, body string }{
		{"POST", "/v1/changes/apply", `{"paths":["a"],"extra":1}`},
		{"PUT", "/v1/workspace", `{"dir":"/w","changes":"sometimes","x":1}`},
		{"GET", "/v1/changes/content", ""},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(bad.method, bad.path, strings.NewReader(bad.body)))
		if rec.Code != http.StatusBadRequest {
			t.Errorf("%s %s %s: %d, want 400", bad.method, bad.path, bad.body, rec.Code)
		}
	}
}
