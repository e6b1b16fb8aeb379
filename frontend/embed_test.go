package frontend

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/fstest"
)

func TestHandler(t *testing.T) {
	built := fstest.MapFS{
		"index.html":         {Data: []byte("<!doctype html><title>Airlock</title>")},
		"assets/index-1.js":  {Data: []byte("console.log(1)")},
		"assets/index-1.css": {Data: []byte("body{}")},
	}
	tests := []struct {
		name, method, path string
		fsys               fstest.MapFS
		status             int
		body, ctype, cache string
	}{
		{"root", "GET", "/", built, 200, "<title>Airlock</title>", "text/html", "no-store"},
		{"root with token", "GET", "/?token=abc", built, 200, "<title>Airlock</title>", "text/html", "no-store"},
		{"index by name", "GET", "/index.html", built, 200, "<title>Airlock</title>", "text/html", "no-store"},
		{"screen path falls back", "GET", "/tasks", built, 200, "<title>Airlock</title>", "text/html", "no-store"},
		{"asset", "GET", "/assets/index-1.js", built, 200, "console.log", "text/javascript", "immutable"},
		{"css", "GET", "/assets/index-1.css", built, 200, "body{}", "text/css", "immutable"},
		{"missing asset is 404, not HTML", "GET", "/assets/gone.js", built, 404, "", "", ""},
		{"directory is the page", "GET", "/assets/", built, 200, "<title>Airlock</title>", "text/html", "no-store"},
		{"escape stays inside", "GET", "/../../etc/passwd", built, 200, "<title>Airlock</title>", "text/html", ""},
		{"no writes", "POST", "/", built, 405, "", "", ""},
		{"not built", "GET", "/", fstest.MapFS{".gitkeep": {}}, 503, "make frontend", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			NewHandler(tt.fsys).ServeHTTP(rec, httptest.NewRequest(tt.method, tt.path, nil))
			res := rec.Result()
			body, _ := io.ReadAll(res.Body)
			if res.StatusCode != tt.status {
				t.Fatalf("status %d, want %d (%s)", res.StatusCode, tt.status, body)
			}
			if !strings.Contains(string(body), tt.body) {
				t.Errorf("body %q lacks %q", body, tt.body)
			}
			if ct := res.Header.Get("Content-Type"); !strings.Contains(ct, tt.ctype) {
				t.Errorf("Content-Type %q, want %q", ct, tt.ctype)
			}
			if cc := res.Header.Get("Cache-Control"); !strings.Contains(cc, tt.cache) {
				t.Errorf("Cache-Control %q, want %q", cc, tt.cache)
			}
			if res.StatusCode == http.StatusOK && res.Header.Get("Referrer-Policy") != "no-referrer" {
				t.Errorf("no Referrer-Policy: the token in the page address could leak")
			}
		})
	}
}

// TestDistEmbedded: the embed compiles in a fresh clone (only .gitkeep).
func TestDistEmbedded(t *testing.T) {
	if _, err := Dist.Open("dist/.gitkeep"); err != nil {
		t.Fatalf("dist/.gitkeep not embedded: %v", err)
	}
	rec := httptest.NewRecorder()
	Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != http.StatusOK && rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("status %d", rec.Code)
	}
}
